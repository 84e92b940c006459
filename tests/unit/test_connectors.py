"""The connector registry: one spec per name, duplicates refused, patches named by connectors exist."""

import pytest

from motor.engine.patches.registry import known_patches
from motor.kv.connectors import (
    REGISTRY,
    ConnectorSpec,
    DispatchProfile,
    DuplicateConnectorError,
    lookup,
    register,
)


def test_every_patch_a_connector_names_is_a_known_patch() -> None:
    patch_names = {patch.name for patch in known_patches()}
    for spec in REGISTRY.values():
        assert set(spec.patches) <= patch_names, f"{spec.name} names an unknown patch: {spec.patches}"


def test_a_connector_registered_twice_is_refused() -> None:
    with pytest.raises(DuplicateConnectorError, match="MooncakeConnector"):
        register(ConnectorSpec("MooncakeConnector", DispatchProfile.PREFILL_FIRST, "again"))
    assert lookup("MooncakeConnector").profile == DispatchProfile.CONCURRENT  # type: ignore[union-attr]


def test_pool_backends_and_bootstrap_servers() -> None:
    pools = {name for name, spec in REGISTRY.items() if spec.pool_backend}
    assert pools == {
        "AscendStoreConnector",
        "MooncakeStoreConnector",
        "MooncakeConnectorStoreV1",
        "LMCacheConnectorV1",
        "UCMConnector",
    }
    assert {name for name, spec in REGISTRY.items() if spec.serves_bootstrap} == {"MooncakeConnector"}
    assert {name for name, spec in REGISTRY.items() if spec.lookup_id_key} == {
        "AscendStoreConnector",
        "MooncakeStoreConnector",
        "MooncakeConnectorStoreV1",
    }
