"""HTCondor command numbers execd sends or serves (condor_includes/condor_commands.h)."""

from __future__ import annotations

from enum import IntEnum


class Command(IntEnum):
    UPDATE_STARTD_AD = 0
    QUERY_STARTD_ADS = 5
    QUERY_SCHEDD_ADS = 6
    QUERY_STARTD_PVT_ADS = 10
    INVALIDATE_STARTD_ADS = 13
    SHARED_PORT_CONNECT = 75
    CONTINUE_CLAIM = 401
    SUSPEND_CLAIM = 402
    DEACTIVATE_CLAIM = 403
    DEACTIVATE_CLAIM_FORCIBLY = 404
    DEACTIVATE_CLAIM_JOB_DONE = 413
    GET_HISTORY = 429  # SCHED_VERS + 29: condor_history -startd
    ALIVE = 441
    REQUEST_CLAIM = 442
    RELEASE_CLAIM = 443
    ACTIVATE_CLAIM = 444
    VACATE_ALL_CLAIMS = 447
    CONFIG_VAL = 457
    VACATE_CLAIM = 465
    VACATE_ALL_FAST = 474
    VACATE_CLAIM_FAST = 475
    UPDATE_GSI_CRED = 487  # SCHED_VERS + 87: a renewed X509 proxy for a job, as a file
    DRAIN_JOBS = 512
    CANCEL_DRAIN_JOBS = 513
    DELEGATE_GSI_CRED_STARTER = 500  # SCHED_VERS + 100: a renewed X509 proxy for a job
    CA_CMD = 1200
    # the starter's commands (STARTER_COMMANDS_BASE 1500); execd's starter is the daemon
    CREATE_JOB_OWNER_SEC_SESSION = 1501
    START_SSHD = 1502
    STARTER_PEEK = 1503
    DC_RECONFIG = 60004
    DC_OFF_GRACEFUL = 60005
    DC_OFF_FAST = 60006
    DC_CONFIG_VAL = 60007
    DC_AUTHENTICATE = 60010
    DC_NOP = 60011
    DC_RECONFIG_FULL = 60012
    DC_OFF_PEACEFUL = 60015
    DC_SEC_QUERY = 60040
    DC_QUERY_INSTANCE = 60045


class Reply(IntEnum):
    """Status integers in replies (condor_commands.h); 3/5/7 only answer REQUEST_CLAIM."""

    NOT_OK = 0
    OK = 1
    TRY_AGAIN = 2
    REQUEST_CLAIM_LEFTOVERS = 3
    REQUEST_CLAIM_LEFTOVERS_2 = 5
    REQUEST_CLAIM_SLOT_AD = 7


class AuthMethod(IntEnum):
    """Bits of the method mask in the authentication handshake (condor_auth.h)."""

    CLAIMTOBE = 2
    FS = 4
    FS_REMOTE = 8
    KERBEROS = 64
    ANONYMOUS = 128
    SSL = 256
    PASSWORD = 512
    MUNGE = 1024
    TOKEN = 2048
    SCITOKENS = 4096


# Names in AuthMethods lists -> bits (IDTOKENS is TOKEN's name in configuration).
AUTH_METHOD_BITS = {
    "CLAIMTOBE": AuthMethod.CLAIMTOBE, "FS": AuthMethod.FS, "FS_REMOTE": AuthMethod.FS_REMOTE,
    "KERBEROS": AuthMethod.KERBEROS, "ANONYMOUS": AuthMethod.ANONYMOUS, "SSL": AuthMethod.SSL,
    "PASSWORD": AuthMethod.PASSWORD, "MUNGE": AuthMethod.MUNGE, "TOKEN": AuthMethod.TOKEN,
    "TOKENS": AuthMethod.TOKEN, "IDTOKENS": AuthMethod.TOKEN, "IDTOKEN": AuthMethod.TOKEN,
    "SCITOKENS": AuthMethod.SCITOKENS, "SCITOKEN": AuthMethod.SCITOKENS,
}  # fmt: skip


# The authorization level HTCondor's startd registers each command at (startd_main.cpp);
# a token whose scope limits its holder (LimitAuthorization) may send only commands of
# the levels it names or that they imply.
COMMAND_PERMISSION: dict[int, str] = {
    Command.REQUEST_CLAIM: "DAEMON", Command.ACTIVATE_CLAIM: "DAEMON",
    Command.DEACTIVATE_CLAIM: "DAEMON", Command.DEACTIVATE_CLAIM_FORCIBLY: "DAEMON",
    Command.DEACTIVATE_CLAIM_JOB_DONE: "DAEMON", Command.RELEASE_CLAIM: "DAEMON",
    Command.SUSPEND_CLAIM: "DAEMON", Command.CONTINUE_CLAIM: "DAEMON", Command.ALIVE: "DAEMON",
    Command.VACATE_ALL_CLAIMS: "ADMINISTRATOR", Command.VACATE_ALL_FAST: "ADMINISTRATOR",
    Command.VACATE_CLAIM: "ADMINISTRATOR", Command.VACATE_CLAIM_FAST: "ADMINISTRATOR",
    Command.DRAIN_JOBS: "ADMINISTRATOR", Command.CANCEL_DRAIN_JOBS: "ADMINISTRATOR",
    Command.QUERY_STARTD_ADS: "READ", Command.GET_HISTORY: "READ", Command.CA_CMD: "WRITE",
    # condor_starter's levels (starter.cpp): the job owner's commands are READ
    Command.CREATE_JOB_OWNER_SEC_SESSION: "DAEMON", Command.START_SSHD: "READ",
    Command.STARTER_PEEK: "READ",
    # condor_starter: WRITE; execd judges it as a claim command (pool_commands.judge)
    Command.DELEGATE_GSI_CRED_STARTER: "DAEMON", Command.UPDATE_GSI_CRED: "DAEMON",
    # daemon-core's own (daemon_core_main.cpp)
    Command.DC_RECONFIG: "ADMINISTRATOR", Command.DC_RECONFIG_FULL: "ADMINISTRATOR",
    Command.DC_OFF_GRACEFUL: "ADMINISTRATOR", Command.DC_OFF_FAST: "ADMINISTRATOR",
    Command.DC_OFF_PEACEFUL: "ADMINISTRATOR", Command.DC_CONFIG_VAL: "READ",
    Command.CONFIG_VAL: "READ",
}  # fmt: skip
# What each level implies (condor_perms.cpp's hierarchy).
IMPLIED_PERMISSION = {"WRITE": "READ", "NEGOTIATOR": "READ", "ADMINISTRATOR": "WRITE",
                      "CONFIG": "READ", "DAEMON": "WRITE", "ADVERTISE_STARTD": "READ",
                      "ADVERTISE_SCHEDD": "READ", "ADVERTISE_MASTER": "READ"}  # fmt: skip


def within_limits(command: int, limits: frozenset[str] | None) -> bool:
    """May a peer whose token names `limits` send `command`? (None: no limits.)"""
    if limits is None:
        return True
    granted: set[str] = set()
    for named in limits:
        level = named.upper()
        while level and level not in granted:
            granted.add(level)
            level = IMPLIED_PERMISSION.get(level, "")
    return COMMAND_PERMISSION.get(command) in granted
