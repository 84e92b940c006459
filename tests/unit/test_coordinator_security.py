"""API keys (plain and PBKDF2 records) and the token bucket / in-flight limits, including across processes."""

import hashlib
import multiprocessing
import time
from pathlib import Path

import pytest

from motor.config.models import ApiKeyConfig
from motor.coordinator.api.auth import REFUSED_CACHE_LIMIT, ApiKeyVerifier, hash_api_key
from motor.coordinator.api.limits import ClientBuckets, InFlightLimit, SharedState, TokenBucket
from motor.coordinator.http.errors import HttpError


async def check(verifier: ApiKeyVerifier, headers: list[tuple[bytes, bytes]]) -> int:
    try:
        await verifier.check(headers)
    except HttpError as error:
        return error.status
    return 200


async def test_plain_and_hashed_keys() -> None:
    record = hash_api_key("s3cret", iterations=1000, salt="pepper")
    _, iterations, digest = record.split(":")
    assert digest == hashlib.pbkdf2_hmac("sha256", b"s3cret", b"pepper", 1000).hex() and iterations == "1000"
    verifier = ApiKeyVerifier(ApiKeyConfig(enable_api_key=True, valid_keys=["plain-key", record]))
    assert await check(verifier, [(b"authorization", b"Bearer plain-key")]) == 200
    assert verifier.slow_verifications == 0, "a plain key needs no PBKDF2"
    assert await check(verifier, [(b"authorization", b"bearer s3cret")]) == 200
    assert verifier.slow_verifications == 1
    assert await check(verifier, [(b"authorization", b"Bearer s3cret")]) == 200
    assert verifier.slow_verifications == 1, "the second check of a key reuses its cached verdict"
    assert await check(verifier, [(b"authorization", b"Bearer wrong")]) == 403
    assert await check(verifier, [(b"authorization", b"Bearer wrong")]) == 403
    assert verifier.slow_verifications == 2, "a refused key's verdict is cached too"
    assert await check(verifier, [(b"authorization", b"Bearer " + record.encode())]) == 403, (
        "the record is no key"
    )
    assert await check(verifier, []) == 401
    assert await check(verifier, [(b"authorization", b"plain-key")]) == 401, "without the prefix"
    assert await check(verifier, [(b"authorization", b"Bearer ")]) == 401


async def test_missing_key_challenge_and_custom_header() -> None:
    verifier = ApiKeyVerifier(
        ApiKeyConfig(enable_api_key=True, valid_keys=["k"], header_name="X-Api-Key", key_prefix="")
    )
    assert await check(verifier, [(b"x-api-key", b"k")]) == 200
    with pytest.raises(HttpError) as caught:
        await verifier.check([(b"authorization", b"Bearer k")])
    assert caught.value.status == 401
    assert any(name == b"www-authenticate" for name, _ in caught.value.headers)


def test_enabled_without_keys_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="valid_keys is empty"):
        ApiKeyVerifier(ApiKeyConfig(enable_api_key=True, valid_keys=[]))


def test_token_bucket_refills_at_capacity_per_window() -> None:
    bucket = TokenBucket(3, 0.3)  # 10 tokens per second
    assert [bucket.try_take()[0] for _ in range(4)] == [True, True, True, False]
    time.sleep(0.15)
    assert bucket.try_take()[0]


def _take_all(path: str, queue: "multiprocessing.Queue[int]") -> None:
    state = SharedState(Path(path))
    bucket = TokenBucket(50, 3600.0, state)
    queue.put(sum(bucket.try_take()[0] for _ in range(40)))


def test_token_bucket_holds_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "state"
    SharedState.create(path, initial_tokens=50)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_take_all, args=(str(path), queue)) for _ in range(3)]
    for worker in workers:
        worker.start()
    granted = [queue.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert sum(granted) == 50, granted


def test_in_flight_limit_counts_every_worker_slot(tmp_path: Path) -> None:
    path = tmp_path / "state"
    SharedState.create(path, initial_tokens=0)
    first = InFlightLimit(3, SharedState(path), slot=0)
    second = InFlightLimit(3, SharedState(path), slot=1)
    assert first.try_enter() and first.try_enter() and second.try_enter()
    assert not second.try_enter() and not first.try_enter()
    first.leave()
    assert second.try_enter()
    SharedState(path).zero_slot(1)  # a dead worker's slot is cleared by the supervisor
    assert first.try_enter()
    local = InFlightLimit(1)
    assert local.try_enter() and not local.try_enter()
    unlimited = InFlightLimit(None)
    assert all(unlimited.try_enter() for _ in range(100))


def keyed(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + key.encode())]


async def test_an_address_runs_out_of_attempts_but_keeps_its_valid_keys() -> None:
    record = hash_api_key("hashed", iterations=1)
    verifier = ApiKeyVerifier(
        ApiKeyConfig(
            enable_api_key=True, valid_keys=["plain", record], attempts_per_client=3, attempts_window=3600
        )
    )
    assert await check_from(verifier, "hashed", "10.0.0.1") == 200, "a hashed key's first use is an attempt"
    assert [await check_from(verifier, f"guess-{i}", "10.0.0.1") for i in range(3)] == [403, 403, 429]
    verifications = verifier.slow_verifications
    assert await check_from(verifier, "guess-99", "10.0.0.1") == 429
    assert verifier.slow_verifications == verifications, "a refused attempt runs no PBKDF2"
    assert await check_from(verifier, "plain", "10.0.0.1") == 200
    assert await check_from(verifier, "hashed", "10.0.0.1") == 200, "verified keys cost no attempt"
    assert await check_from(verifier, "guess-0", "10.0.0.2") == 403, "other addresses have their own attempts"
    with pytest.raises(HttpError) as caught:
        await verifier.check(keyed("guess-1"), "10.0.0.1")
    assert caught.value.code == "too_many_key_attempts" and dict(caught.value.headers)[b"retry-after"]


async def test_wrong_keys_never_evict_verified_ones() -> None:
    record = hash_api_key("hashed", iterations=1)
    verifier = ApiKeyVerifier(
        ApiKeyConfig(enable_api_key=True, valid_keys=[record], attempts_per_client=100_000)
    )
    assert await check_from(verifier, "hashed", "10.0.0.1") == 200
    for i in range(REFUSED_CACHE_LIMIT + 10):
        assert await check_from(verifier, f"guess-{i}", "10.0.0.1") == 403
    verifications = verifier.slow_verifications
    assert await check_from(verifier, "hashed", "10.0.0.1") == 200
    assert verifier.slow_verifications == verifications, "the valid key's verdict survived the flood"
    assert await check_from(verifier, f"guess-{REFUSED_CACHE_LIMIT + 9}", "10.0.0.1") == 403
    assert verifier.slow_verifications == verifications, "a recently refused key is refused from the cache"


def test_a_pbkdf2_record_without_iterations_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match=r"valid_keys\[1\].*at least 1 iteration"):
        ApiKeyVerifier(ApiKeyConfig(enable_api_key=True, valid_keys=["plain", "salt:0:" + "ab" * 32]))


def test_client_buckets_are_per_address_and_bounded() -> None:
    buckets = ClientBuckets(2, 0.2, max_clients=2)  # 10 tokens per second per address
    assert [buckets.try_take("a") for _ in range(3)] == [True, True, False]
    assert buckets.try_take("b")
    time.sleep(0.15)
    assert buckets.try_take("a"), "refilled"
    assert buckets.try_take("c") and len(buckets._buckets) == 2, "the oldest address was forgotten"


async def check_from(verifier: ApiKeyVerifier, key: str, client: str) -> int:
    try:
        await verifier.check(keyed(key), client)
    except HttpError as error:
        return error.status
    return 200
