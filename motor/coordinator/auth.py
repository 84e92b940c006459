"""API keys (`api_key_config`): plain keys or PBKDF2 records `salt:iterations:hexhash`.

hexhash = hashlib.pbkdf2_hmac("sha256", key.encode(), salt.encode(), iterations).hex() — see
`hash_api_key`. Verifying a PBKDF2 record is deliberately slow, so it runs off the event loop and its
outcome is remembered per presented key (by SHA-256) in a bounded cache.
"""

import asyncio
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from motor.config.models import ApiKeyConfig
from motor.coordinator.errors import HttpError

HASHED_KEY = re.compile(r"^([^:]+):(\d+):([0-9a-fA-F]{64})$")
DEFAULT_ITERATIONS = 100_000
CACHE_LIMIT = 4096


def hash_api_key(key: str, *, iterations: int = DEFAULT_ITERATIONS, salt: str | None = None) -> str:
    """A `salt:iterations:hexhash` record for `valid_keys`."""
    salt = salt or secrets.token_hex(16)
    digest = hashlib.pbkdf2_hmac("sha256", key.encode(), salt.encode(), iterations).hex()
    return f"{salt}:{iterations}:{digest}"


@dataclass(frozen=True)
class _HashedKey:
    salt: bytes
    iterations: int
    digest: bytes

    def matches(self, key: bytes) -> bool:
        return hmac.compare_digest(
            hashlib.pbkdf2_hmac("sha256", key, self.salt, self.iterations), self.digest
        )


class ApiKeyVerifier:
    def __init__(self, config: ApiKeyConfig) -> None:
        if not config.valid_keys:
            raise ValueError(
                "motor_coordinator_config.api_key_config.valid_keys is empty while enable_api_key is true; "
                "add keys (plain or salt:iterations:hexhash) or disable API keys"
            )
        if not config.header_name:
            raise ValueError("motor_coordinator_config.api_key_config.header_name must not be empty")
        self.header = config.header_name.lower().encode()
        self.prefix = config.key_prefix.encode()
        self._plain: list[bytes] = []
        self._hashed: list[_HashedKey] = []
        for key in config.valid_keys:
            match = HASHED_KEY.match(key)
            if match:
                salt, iterations, digest = match.groups()
                self._hashed.append(_HashedKey(salt.encode(), int(iterations), bytes.fromhex(digest)))
            else:
                self._plain.append(key.encode())
        self._verdicts: dict[bytes, bool] = {}
        self.slow_verifications = 0  # PBKDF2 verifications run (cache misses); lets tests observe the cache
        scheme = config.key_prefix.strip() or "ApiKey"
        self._challenge = [(b"www-authenticate", f'{scheme} realm="motor"'.encode())]

    async def check(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Raise 401 when no key is presented as `<header_name>: <key_prefix><key>`, 403 when it is wrong."""
        value = None
        for name, header_value in headers:
            if name == self.header:
                value = header_value
                break
        prefix = self.prefix
        if value is None or not value[: len(prefix)].lower() == prefix.lower() or len(value) == len(prefix):
            raise HttpError(
                401,
                f"missing API key: send it as '{self.header.decode()}: {prefix.decode()}<key>'",
                type_="authentication_error",
                code="missing_api_key",
                headers=self._challenge,
            )
        key = value[len(prefix) :].strip()
        if not await self._valid(key):
            raise HttpError(403, "the API key is not valid", type_="permission_error", code="invalid_api_key")

    async def _valid(self, key: bytes) -> bool:
        for plain in self._plain:
            if hmac.compare_digest(plain, key):
                return True
        if not self._hashed:
            return False
        fingerprint = hashlib.sha256(key).digest()
        verdict = self._verdicts.get(fingerprint)
        if verdict is None:
            self.slow_verifications += 1
            verdict = await asyncio.to_thread(lambda: any(h.matches(key) for h in self._hashed))
            if len(self._verdicts) >= CACHE_LIMIT:
                self._verdicts.pop(next(iter(self._verdicts)))
            self._verdicts[fingerprint] = verdict
        return verdict
