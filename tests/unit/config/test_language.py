"""The HTCondor config language as execd reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.config.loader import Config, load_config, parse_config_text
from execd.errors import ConfigError


def cfg(text: str, **env: str) -> Config:
    return parse_config_text(text, filename="test.conf", env=env)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_names_are_case_insensitive_and_comments_ignored() -> None:
    c = cfg("# a comment\nFoo = bar   \n  # indented comment\n")
    assert c.get("FOO") == "bar"
    assert c.get("foo") == "bar"
    assert c.names() == ["Foo"]


def test_empty_value_is_defined_as_empty() -> None:
    c = cfg("X =\n")
    assert c.get("X") == ""
    assert c.is_defined("X")


def test_backslash_continues_a_line() -> None:
    c = cfg("START = KeyboardIdle > 60 && \\\n   LoadAvg < 0.3\n")
    assert c.get("START") == "KeyboardIdle > 60 && LoadAvg < 0.3"  # lines trimmed, as HTCondor
    definition = c.definition("START")
    assert definition is not None
    assert definition.origin.line == 2  # as condor_config_val -v: the line the value ends on


def test_multiline_value_block() -> None:
    c = cfg("SLOT_TYPE_1 @=slot\n  Cpus = 2\n  GPUs = 1 : Capability >= 8.0\n@slot\nY = 1\n")
    assert c.get("SLOT_TYPE_1") == "Cpus = 2\nGPUs = 1 : Capability >= 8.0"  # trimmed, as HTCondor
    assert c.get("Y") == "1"


def test_unterminated_block_names_its_start() -> None:
    with pytest.raises(ConfigError) as err:
        cfg("A = 1\nB @=end\n x\n")
    assert (err.value.file, err.value.line) == ("test.conf", 2)
    assert "@end" in err.value.message


def test_macros_default_env_dollar_and_undefined() -> None:
    c = cfg(
        "A = 10\nB = $(A) + $(C:5) + $(Missing)\nD = $ENV(HOME_X)/x $ENV(NOPE:none)\n"
        "E = $(DOLLAR)(A)\n",
        HOME_X="/h",
    )
    assert c.get("B") == "10 + 5 + "
    assert c.get("D") == "/h/x none"
    assert c.get("E") == "$(A)"


def test_int_and_real_evaluate() -> None:
    c = cfg("H = 3600\nX = $INT(H) * 2\nY = $REAL(H)\nZ = 2 * 3\nW = $INT(Z)\n")
    assert c.get("X") == "3600 * 2"
    assert c.get("Y") == "3600"  # %.16G, as HTCondor
    assert c.get("W") == "6"


def test_int_of_a_non_number_is_an_error_naming_it() -> None:
    c = cfg("S = hello\nX = $INT(S)\n")
    with pytest.raises(ConfigError, match=r"\$INT\(S\)"):
        c.get("X")


def test_self_reference_appends_to_previous_value() -> None:
    c = cfg('START = KeyboardIdle > 60\nSTART = ($(START)) || Owner == "coltrane"\n')
    assert c.get("START") == '(KeyboardIdle > 60) || Owner == "coltrane"'


def test_self_reference_without_previous_uses_the_builtin_default() -> None:
    c = cfg("STARTD_ATTRS = $(STARTD_ATTRS) Color\n")
    assert c.get("STARTD_ATTRS") == " Color"


def test_later_definition_wins_and_expansion_is_lazy() -> None:
    c = cfg("A = $(B)\nB = 1\nB = 2\n")
    assert c.get("A") == "2"


def test_reference_cycle_is_an_error_naming_the_cycle() -> None:
    c = cfg("A = $(B)\nB = $(A)\n")
    with pytest.raises(ConfigError, match="macro cycle: A -> B -> A"):
        c.get("A")


def test_deep_chain_is_an_error_not_a_stack_overflow() -> None:
    text = "".join(f"M{i} = $(M{i + 1})\n" for i in range(500)) + "M500 = end\n"
    with pytest.raises(ConfigError, match="deeper than"):
        cfg(text).get("M0")


def test_exponential_growth_is_an_error() -> None:
    text = "".join(f"G{i} = $(G{i + 1})$(G{i + 1})\n" for i in range(40)) + "G40 = xx\n"
    with pytest.raises(ConfigError):
        cfg(text).get("G0")


def test_subsystem_and_slot_qualified_lookup() -> None:
    c = cfg(
        "START = True\nSTARTD.START = Owner == \"a\"\nSLOT2_START = False\n"
        "SLOT_TYPE_3_START = Owner == \"b\"\nSTARTER.JOB_HOOK_KEYWORD = X\n"
    )
    assert c.get("START", subsystem=None) == "True"
    assert c.get("START") == 'Owner == "a"'
    assert c.get("START", slot=2) == "False"
    assert c.get("START", slot=5, slot_type=3) == 'Owner == "b"'
    assert c.get("JOB_HOOK_KEYWORD", subsystem="STARTER") == "X"
    assert c.get("JOB_HOOK_KEYWORD") is None


def test_if_elif_else_with_defined_version_and_literals() -> None:
    c = cfg(
        "if defined NOPE\n A = 1\nelif version >= 25.0\n A = 2\nelse\n A = 3\nendif\n"
        "if version < 8.0\n B = old\nelse\n B = new\nendif\n"
        "if ! false\n C = yes\nendif\n"
        "X = 0\nif $(X)\n D = bad\nendif\n"
        "if true\n if false\n  E = no\n else\n  E = nested\n endif\nendif\n"
    )
    assert c.get("A") == "2"
    assert c.get("B") == "new"
    assert c.get("C") == "yes"
    assert c.get("D") is None
    assert c.get("E") == "nested"


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("if true\nA = 1\n", "without a matching 'endif'", 1),
        ("A = 1\nendif\n", "'endif' without 'if'", 2),
        ("else\n", "'else' without 'if'", 1),
        ("if true\nelse\nelse\nendif\n", "second 'else'", 3),
        ("if frobnicate the knob\nendif\n", "cannot evaluate", 1),
        ("just some words\n", "expected 'NAME = value'", 1),
        ("use POLICY : No_Such_Policy\n", "unknown template 'No_Such_Policy'", 1),
        ("use NOPE : Thing\n", "unknown metaknob category", 1),
        ("include : /bin/true |\n", "command is not supported", 1),
        ("use POLICY : Preempt_If\n", "requires an argument", 1),
        ("error : stop right here\n", "stop right here", 1),
    ],
)
def test_syntax_errors_name_file_line_and_problem(text: str, message: str, line: int) -> None:
    with pytest.raises(ConfigError) as err:
        cfg(text).get("A")
    assert message in err.value.message
    assert err.value.file == "test.conf"
    assert err.value.line == line
    assert str(err.value).startswith(f"test.conf:{line}: ")


def test_include_relative_ifexist_and_origin(tmp_path: Path) -> None:
    write(tmp_path / "sub" / "policy.conf", "START = False\n")
    main = write(
        tmp_path / "main.conf",
        "include : sub/policy.conf\ninclude ifexist : sub/missing.conf\nX = 1\n",
    )
    c = load_config(main, env={})
    assert c.get("START") == "False"
    found = c.definition("START")
    assert found is not None
    assert found.origin.file == str(tmp_path / "sub" / "policy.conf")
    assert found.origin.line == 1


def test_missing_include_names_the_file_and_includer(tmp_path: Path) -> None:
    main = write(tmp_path / "main.conf", "A = 1\ninclude : nowhere.conf\n")
    with pytest.raises(ConfigError) as err:
        load_config(main, env={})
    assert "nowhere.conf does not exist" in err.value.message
    assert err.value.file == f"{main}:2"


def test_include_loop_is_an_error_not_a_hang(tmp_path: Path) -> None:
    write(tmp_path / "a.conf", "include : b.conf\n")
    write(tmp_path / "b.conf", "include : a.conf\n")
    with pytest.raises(ConfigError, match="include loop"):
        load_config(tmp_path / "a.conf", env={})


def test_local_config_dir_in_lexical_order_then_local_config_file(tmp_path: Path) -> None:
    d = tmp_path / "config.d"
    write(d / "20-b", "ORDER = $(ORDER) b\n")
    write(d / "10-a", "ORDER = $(ORDER) a\n")
    write(d / "30-c~", "ORDER = $(ORDER) backup\n")
    write(d / ".hidden", "ORDER = $(ORDER) hidden\n")
    write(tmp_path / "local.conf", "ORDER = $(ORDER) local\n")
    main = write(
        tmp_path / "main.conf",
        f"ORDER = main\nLOCAL_CONFIG_DIR = {d}\nLOCAL_CONFIG_FILE = {tmp_path}/local.conf\n",
    )
    c = load_config(main, env={})
    assert c.get("ORDER") == "main a b local"
    assert c.files == [str(main), str(d / "10-a"), str(d / "20-b"), str(tmp_path / "local.conf")]


def test_bad_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nothing", env={})
