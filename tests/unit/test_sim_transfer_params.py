import pytest

from motor.engine.sim.config import SimConfig
from motor.engine.sim.errors import SimError
from motor.engine.sim.transfer import TransferRequest, parse_transfer_params, prefill_result_params


def test_absent_params_mean_no_transfer() -> None:
    assert parse_transfer_params(None) is None


def test_each_profile_shape_parses() -> None:
    assert parse_transfer_params({"do_remote_decode": True, "do_remote_prefill": False}) == TransferRequest(
        remote_decode=True
    )
    concurrent = parse_transfer_params(
        {
            "do_remote_prefill": True,
            "transfer_id": 123,
            "remote_engine_id": "p0",
            "remote_bootstrap_addr": "http://h:1",
        }
    )
    assert concurrent == TransferRequest(remote_prefill=True, transfer_id="123", remote_engine_id="p0")
    pushed = parse_transfer_params({"do_remote_prefill": True, "metaserver": "http://127.0.0.1:9/cb/1"})
    assert pushed is not None and pushed.metaserver == "http://127.0.0.1:9/cb/1"
    pulled = parse_transfer_params({"do_remote_prefill": True, "remote_block_keys": ["a", "b"]})
    assert pulled is not None and pulled.remote_block_keys == ("a", "b")


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {"do_remote_decode": "yes"},
        {"transfer_id": 1.5},
        {"metaserver": "ftp://x"},
        {"remote_block_keys": "k"},
        {"remote_block_keys": [1]},
    ],
)
def test_malformed_params_are_a_400(raw: object) -> None:
    with pytest.raises(SimError) as error:
        parse_transfer_params(raw)
    assert error.value.status == 400
    assert error.value.param == "kv_transfer_params"


def test_prefill_result_names_the_engine_and_the_blocks() -> None:
    config = SimConfig(host="127.0.0.1", port=8200, engine_id="prefill-0", block_size=16)
    params = prefill_result_params(config, block_keys=["k1", "k2"], transfer_id="7", kv_error=None)
    assert params == {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "prefill-0",
        "remote_host": "127.0.0.1",
        "remote_port": 8200,
        "remote_block_keys": ["k1", "k2"],
        "remote_block_size": 16,
        "remote_num_tokens": 32,
        "transfer_id": "7",
    }
    failed = prefill_result_params(config, block_keys=[], transfer_id=None, kv_error="put failed")
    assert (
        failed["remote_block_keys"] == []
        and failed["kv_error"] == "put failed"
        and "transfer_id" not in failed
    )
