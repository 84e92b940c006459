"""What a failed store call raises, and the Mooncake error codes motor tells apart."""

NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706
TRANSFER_FAIL = -800
RPC_FAIL = -900
CODE_NAMES = {
    NO_AVAILABLE_HANDLE: "NO_AVAILABLE_HANDLE",
    INVALID_PARAMS: "INVALID_PARAMS",
    OBJECT_NOT_FOUND: "OBJECT_NOT_FOUND",
    OBJECT_HAS_LEASE: "OBJECT_HAS_LEASE",
    TRANSFER_FAIL: "TRANSFER_FAIL",
    RPC_FAIL: "RPC_FAIL",
}


class StoreError(Exception):
    """A store operation failed; the message says what failed and how to fix it."""

    code: int | None

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class StoreUnavailable(StoreError):
    """The master is unreachable or the client could not be set up."""


class StoreConfigError(StoreError, ValueError):
    """The store config (dict or `MOONCAKE_CONFIG_PATH` JSON) is incomplete or malformed."""
