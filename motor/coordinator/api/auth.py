"""API keys (`api_key_config`): plain keys or PBKDF2 records `salt:iterations:hexhash`.

hexhash = hashlib.pbkdf2_hmac("sha256", key.encode(), salt.encode(), iterations).hex() — see
`hash_api_key`. A presented key is known by its SHA-256 fingerprint, compared in constant time with the plain
keys' and looked up among the hashed keys already verified (at most one entry per record, so nothing evicts
them). Any other key costs its client address a token of `attempts_per_client` before it is looked at (→ 429
when none is left); then a recently refused key is refused at once (a bounded cache of its own), and only an
unknown one runs PBKDF2 — off the event loop, one at a time.
"""

import asyncio
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from motor.config.models import ApiKeyConfig
from motor.coordinator.api.limits import ClientBuckets
from motor.coordinator.http.errors import HttpError

HASHED_KEY = re.compile(r"^([^:]+):(\d+):([0-9a-fA-F]{64})$")
DEFAULT_ITERATIONS = 100_000
REFUSED_CACHE_LIMIT = 4096


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
        for index, key in enumerate(config.valid_keys):
            match = HASHED_KEY.match(key)
            if match:
                salt, iterations, digest = match.groups()
                if int(iterations) < 1:
                    raise ValueError(
                        f"motor_coordinator_config.api_key_config.valid_keys[{index}]: a PBKDF2 record needs at "
                        "least 1 iteration; make one with motor.coordinator.api.auth.hash_api_key"
                    )
                self._hashed.append(_HashedKey(salt.encode(), int(iterations), bytes.fromhex(digest)))
            else:
                self._plain.append(_fingerprint(key.encode()))
        self._verified: set[bytes] = set()  # fingerprints of hashed keys that matched
        self._refused: dict[bytes, None] = {}  # fingerprints of recent wrong keys, oldest first
        self._attempts = ClientBuckets(config.attempts_per_client, config.attempts_window)
        self._pbkdf2 = asyncio.Semaphore(1)
        self.slow_verifications = 0  # PBKDF2 verifications run (cache misses); lets tests observe the cache
        scheme = config.key_prefix.strip() or "ApiKey"
        self._challenge = [(b"www-authenticate", f'{scheme} realm="motor"'.encode())]

    async def check(
        self,
        headers: list[tuple[bytes, bytes]],
        client: str | None = None,
        bare_key_header: bytes | None = None,
    ) -> None:
        """Raise 401 when no key is presented as `<header_name>: <key_prefix><key>` (or, when given, as
        `<bare_key_header>: <key>`, Anthropic's `x-api-key`), 403 when it is wrong, 429 when `client` (its
        address) has no attempts left for a key not known to be valid."""
        value = None
        prefix = self.prefix
        for name, header_value in headers:
            if name == self.header:
                value = header_value
                break
            if name == bare_key_header and value is None:
                value = prefix + header_value
        if value is None or not value[: len(prefix)].lower() == prefix.lower() or len(value) == len(prefix):
            raise HttpError(
                401,
                f"missing API key: send it as '{self.header.decode()}: {prefix.decode()}<key>'",
                type_="authentication_error",
                code="missing_api_key",
                headers=self._challenge,
            )
        key = value[len(prefix) :].strip()
        fingerprint = _fingerprint(key)
        if self._known_valid(fingerprint):
            return
        if client is not None and not self._attempts.try_take(client):
            raise HttpError(
                429,
                "too many attempts with API keys that are not valid from this address; retry later",
                type_="rate_limit_error",
                code="too_many_key_attempts",
                headers=[(b"retry-after", b"%d" % max(1, round(self._attempts.retry_after())))],
            )
        if fingerprint in self._refused or not await self._verify(key, fingerprint):
            raise HttpError(403, "the API key is not valid", type_="permission_error", code="invalid_api_key")

    def _known_valid(self, fingerprint: bytes) -> bool:
        matched = False
        for plain in self._plain:  # every key compared: the time does not tell which one matched
            matched |= hmac.compare_digest(plain, fingerprint)
        return matched or fingerprint in self._verified

    async def _verify(self, key: bytes, fingerprint: bytes) -> bool:
        if not self._hashed:
            return self._refuse(fingerprint)
        async with self._pbkdf2:
            if fingerprint in self._verified:  # verified while this check waited for its turn
                return True
            if fingerprint in self._refused:
                return False
            self.slow_verifications += 1
            valid = await asyncio.to_thread(lambda: any(h.matches(key) for h in self._hashed))
        if valid:
            self._verified.add(fingerprint)
            return True
        return self._refuse(fingerprint)

    def _refuse(self, fingerprint: bytes) -> bool:
        if len(self._refused) >= REFUSED_CACHE_LIMIT:
            del self._refused[next(iter(self._refused))]
        self._refused[fingerprint] = None
        return False


def _fingerprint(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()
