"""HTCondor's special config macros ($CHOICE, $SUBSTR, $INT, $REAL, $STRING, $EVAL,
$BASENAME, $DIRNAME, $F...(), $ENV, $RANDOM_CHOICE), line continuation, `@=` blocks,
`if defined`/`if version` and the obsolete `NAME : value` assignment read as HTCondor
25.x reads them.

The reference is the real config reader of the htcondor2 module
(tests/unit/config/htcondor_reader.py), run once over one config holding every case. The
expected values are written here too, so that a broken reference cannot pass a case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.config.loader import load_config
from execd.errors import ConfigError
from tests.unit.config.htcondor_reader import reference_values

# (config lines, {name: the value HTCondor gives it}); names are unique across cases
CASES: list[tuple[str, dict[str, str]]] = [
    ("C_L = a, b , c\nC_I = 2\nC_A = $CHOICE(C_I,C_L)\nC_B = $CHOICE(1, p, q, r)\n"
     "C_C = $CHOICE(0,C_L)", {"C_A": "c", "C_B": "q", "C_C": "a"}),
    ("S_S = hello world\nS_A = $SUBSTR(S_S,0,5)\nS_B = $SUBSTR(S_S,6)\n"
     "S_C = $SUBSTR(S_S,-5,2)\nS_D = $SUBSTR(S_S,2,-2)\nS_E = $SUBSTR(S_S, 1)\n"
     "S_F = x$SUBSTR( S_S ,1)",
     {"S_A": "hello", "S_B": "world", "S_C": "wo", "S_D": "llo wor", "S_E": "ello world",
      "S_F": "x"}),
    ("I_V = 7\nI_A = $INT(I_V,%03d)\nI_B = $INT(3*4)\nI_C = $INT(7/2)\nI_D = $INT(3.0)\n"
     "I_E = $INT(1e2)\nI_F = $INT(true)\nI_G = $INT( 3 )\nI_H = $INT(3,x%dy)\n"
     "I_I = $INT(3,%lld)\nI_J = $INT(-4)",
     {"I_A": "007", "I_B": "12", "I_C": "3", "I_D": "3", "I_E": "100", "I_F": "1",
      "I_G": "3", "I_H": "x3y", "I_I": "3", "I_J": "-4"}),
    ("R_V = 10\nR_A = $REAL(R_V)\nR_B = $REAL(R_V,%.2f)\nR_C = $REAL(R_V,%.0f)\n"
     "R_D = $REAL(7/2)\nR_E = $REAL(7.0/2)\nR_F = $REAL(1e3)\nR_G = $REAL(2.5,%g)\n"
     "R_H = $REAL(3,%e)",
     {"R_A": "10", "R_B": "10.00", "R_C": "10.0", "R_D": "3", "R_E": "3.5", "R_F": "1000",
      "R_G": "2.5", "R_H": "3.000000e+00"}),
    ('T_S = "quoted"\nT_A = $STRING(T_S)\nT_B = $STRING(plain text)\n'
     "T_C = $STRING(T_S,[%s])\nT_D = $STRING(1+2)\nT_E = $STRING(T_S,%8s)\n"
     "T_F = $STRING(T_S , %8s)",  # a name is not trimmed: "T_S " names nothing
     {"T_A": "quoted", "T_B": "plain text", "T_C": "[quoted]", "T_D": "1+2",
      "T_E": "  quoted", "T_F": "     T_S "}),
    ('E_N = 2\nE_A = $EVAL(E_N)\nE_B = $EVAL(1+2)\nE_C = $EVAL("x" + 1)\nE_D = $EVAL(nothing)\n'
     'E_E = $EVAL(7.0/2)\nE_F = $EVAL({1,2})\nE_G = $EVAL(true)\nE_H = $EVAL([a=1])\n'
     'E_I = $EVAL("s")',
     {"E_A": "2", "E_B": "3", "E_C": "error", "E_D": "undefined",
      "E_E": "3.500000000000000E+00", "E_F": "{ 1,2 }", "E_G": "true", "E_H": "[ a = 1 ]",
      "E_I": "s"}),
    ("B_P = /a/b/c.tar.gz\nB_A = $BASENAME(B_P)\nB_B = $DIRNAME(B_P)\n"
     "B_C = $BASENAME(B_P, .tar.gz)\nB_D = $BASENAME(B_P,.gz)",
     {"B_A": "c.tar.gz", "B_B": "/a/b/", "B_C": "c", "B_D": "c.tar"}),
    ("F_P = /a/b/c.txt\nF_A = $Fp(F_P)\nF_B = $Fn(F_P)\nF_C = $Fx(F_P)\nF_D = $Fnx(F_P)\n"
     "F_E = $Fd(F_P)\nF_F = $F(F_P)\nF_G = $F(NOT_DEFINED)",
     {"F_A": "/a/b/", "F_B": "c", "F_C": ".txt", "F_D": "c.txt", "F_E": "b/",
      "F_F": "/a/b/c.txt", "F_G": "NOT_DEFINED"}),
    ("G_P = dir/sub/f.txt\nG_A = $Fpb(G_P)\nG_B = $Fxb(G_P)\nG_C = $Fdd(G_P)\n"
     "G_D = $Fq(G_P)\nG_E = $Fqa(G_P)\nG_F = $Fdb(G_P)\nG_G = $Fnq(G_P)\nG_H = $Fa(G_P)\n"
     "G_I = $Fdn(G_P)",
     {"G_A": "dir/sub", "G_B": "txt", "G_C": "dir/sub/", "G_D": '"dir/sub/f.txt"',
      "G_E": "'dir/sub/f.txt'", "G_F": "sub", "G_G": '"f"', "G_H": "dir/sub/f.txt",
      "G_I": "sub/f"}),
    ('H_P = "/q/u o/t.d"\nH_A = $Fn(H_P)\nH_B = $Fp(H_P)\nH_C = $F(H_P)\nH_D = $Fq(H_P)\n'
     "H_E = .bashrc\nH_F = $Fn(H_E)\nH_G = /x/.hid.txt\nH_H = $Fn(H_G)\nH_I = $Fx(H_G)\n"
     "H_J = f.txt\nH_K = $Fn(H_J)\nH_L = $Fx(H_J)",
     {"H_A": "t", "H_B": "/q/u o/", "H_C": "/q/u o/t.d", "H_D": '"/q/u o/t.d"',
      "H_F": ".bashrc", "H_H": ".hid", "H_I": ".txt", "H_K": "f", "H_L": ".txt"}),
    ("N_A = $ENV(EXECD_TEST_SET)\nN_B = $ENV(EXECD_TEST_UNSET)\nN_C = $ENV(EXECD_TEST_UNSET:d)\n"
     "N_L = solo\nN_D = $RANDOM_CHOICE(N_L)\nN_E = $RANDOM_CHOICE(one)",
     {"N_A": "set", "N_B": "UNDEFINED", "N_C": "d", "N_D": "solo", "N_E": "one"}),
    ("L_A = a \\\n    b \\\n    c\nL_B = a\\\n  b\nL_C = a \\\n\\\n  b",
     {"L_A": "a b c", "L_B": "ab", "L_C": "a b"}),
    ("K_A : colon\nK_B:=x", {"K_A": "colon", "K_B": "=x"}),
    ("M_A @=end\n  x\n\n   y  \n # not kept\n@end", {"M_A": "x\ny"}),
    ("D_E =\nif defined D_E\nD_A = yes\nelse\nD_A = no\nendif\n"
     "if defined 5\nD_B = yes\nendif\nif defined true\nD_C = yes\nendif\n"
     "if version >= v25.0\nD_D = yes\nendif\nif version == 25.14\nD_F = yes\nendif",
     {"D_A": "no", "D_B": "yes", "D_C": "yes", "D_D": "yes", "D_F": "yes"}),
    ("U_A = $Fnope(X)\nU_B = $NOTAFUNC(X)\nU_C = $int(3)",
     {"U_A": "$Fnope(X)", "U_B": "$NOTAFUNC(X)", "U_C": "$int(3)"}),
]

ENV = {"EXECD_TEST_SET": "set"}

@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("macros") / "condor_config"
    path.write_text("RELEASE_DIR = /usr\n" + "\n".join(text for text, _ in CASES) + "\n")
    return path


@pytest.fixture(scope="module")
def reference(config_file: Path) -> dict[str, str | None]:
    names = [name for _, expected in CASES for name in expected]
    return {name: value for name, (value, _) in reference_values(config_file, names, ENV).items()}


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[e and next(iter(e))[:1] + "_"
                                                           for _, e in CASES])  # fmt: skip
def test_special_macros_expand_as_htcondor_does(
    text: str, expected: dict[str, str], config_file: Path, reference: dict[str, str | None]
) -> None:
    ours = load_config(config_file, env=ENV)
    for name, value in expected.items():
        assert reference[name] == value, f"HTCondor's reader gives {name} = {reference[name]!r}"
        assert ours.get(name) == value, name


@pytest.mark.parametrize("line", ["if version == 25", "if version >= 5.0"])
def test_a_version_that_is_not_major_minor_is_an_error(line: str, tmp_path: Path) -> None:
    path = tmp_path / "condor_config"
    path.write_text(f"{line}\nA = 1\nendif\n")
    with pytest.raises(ConfigError, match="the version literal is invalid") as err:
        load_config(path, env={})
    assert err.value.line == 1


def test_colon_assignment_warns_that_it_is_obsolete(config_file: Path) -> None:
    ours = load_config(config_file, env=ENV)
    assert any("obsolete use of ':' to assign K_A" in w for w in ours.warnings), ours.warnings


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("X = $CHOICE(5, a, b)", r"\$CHOICE\(5, a, b\): index 5 is past the list's 2 items"),
        ("X = $CHOICE(two, a, b)", r"\$CHOICE\(two, a, b\): 'two' is not an integer"),
        ("X = $CHOICE(1,NO_SUCH_LIST)", r"no list named 'NO_SUCH_LIST'"),
        ("X = $SUBSTR(Y)", r"\$SUBSTR\(Y\): no start position"),
        ("X = $INT(hello)", r"\$INT\(hello\): 'hello' is not an integer"),
        ("X = $INT(V*2)", r"'V\*2' is not an integer"),  # V is a macro, not an attribute
        ("X = $INT(3, 5)", r"' 5' is not a printf format for one integer"),
        ("X = $REAL(2.5,%d)", r"'%d' is not a printf format for one real"),
        ("X = $STRING(a,%s %s)", r"is not a printf format for one string"),
        ("X = $RANDOM_CHOICE()", r"nothing to choose from"),
        ("X = $INT(1e400)", r"'1e400' is not an integer"),  # infinite: no int
        ('X = $INT(real("NaN"))', r"is not an integer"),
        ("X = $INT(2,%99999999999d)", r"wider than 4096 characters"),
        ("X = $SUBSTR(X,1e400)", r"'1e400' is not an integer"),
    ],
)
def test_a_bad_special_macro_is_a_config_error_naming_it(
    line: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "condor_config"
    path.write_text(line + "\n")
    config = load_config(path, env={})
    with pytest.raises(ConfigError, match=message):
        config.get("X")
