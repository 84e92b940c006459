"""Encoder outputs handed over through shared storage, as vLLM's ECExampleConnector does it (EPD).

An ec_producer (encode instance) writes one file per multimodal item, `<shared_storage_path>/<mm_hash>.emb`; an
ec_consumer (prefill) needs the file of every item of a request and fails the request when one is missing. The
file holds a one-line JSON header standing in for the embedding: the simulator computes none.
"""

import asyncio
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from motor.engine.sim.config import EcTransferConfig
from motor.engine.sim.errors import SimError
from motor.engine.sim.metrics import EngineMetrics
from motor.engine.sim.multimodal import MM_TOKENS_PER_ITEM, MmItem

SUFFIX = ".emb"
FORMAT = "motor-sim encoder output (simulated, no embedding)"


def embedding_path(root: Path, mm_hash: str) -> Path:
    return root / f"{mm_hash}{SUFFIX}"


def header(item: MmItem) -> bytes:
    fields = {
        "format": FORMAT,
        "mm_hash": item.mm_hash,
        "modality": item.modality,
        "num_tokens": MM_TOKENS_PER_ITEM,
    }
    return json.dumps(fields).encode() + b"\n"


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the whole file or none: it is written under a temporary name in the same directory first."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _read_hash(path: Path) -> str | None:
    """The mm_hash a file's header names; None when it is not an encoder output the simulator wrote."""
    try:
        fields = json.loads(path.read_bytes().split(b"\n", 1)[0])
    except ValueError:
        return None
    return fields.get("mm_hash") if isinstance(fields, dict) and fields.get("format") == FORMAT else None


class EcStorage:
    """One engine's side of the handover; its file I/O runs in a thread (shared storage may be slow)."""

    def __init__(self, config: EcTransferConfig, metrics: EngineMetrics) -> None:
        self.role = config.ec_role
        self.root = Path(config.ec_connector_extra_config.shared_storage_path)
        self._metrics = metrics

    async def hand_over(self, items: Sequence[MmItem]) -> None:
        """Save (producer) or load (consumer) the encoder outputs of a request's items; raises SimError (500)."""
        if not items:
            return
        if self.role == "ec_producer":
            await asyncio.to_thread(self._save, items)
            self._metrics.ec_saved += len(items)
        else:
            await asyncio.to_thread(self._load, items)
            self._metrics.ec_loaded += len(items)

    def _save(self, items: Sequence[MmItem]) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for item in items:
                write_atomically(embedding_path(self.root, item.mm_hash), header(item))
        except OSError as exc:
            raise SimError(500, f"cannot save encoder outputs under {self.root}: {exc}") from None

    def _load(self, items: Sequence[MmItem]) -> None:
        missing = [item for item in items if not embedding_path(self.root, item.mm_hash).is_file()]
        if missing:
            self._metrics.ec_missing += len(missing)
            first = missing[0]
            more = f" (and {len(missing) - 1} more of this request's items)" if len(missing) > 1 else ""
            raise SimError(
                500,
                f"encoder output of {first.modality} mm_hash {first.mm_hash} is missing at "
                f"{embedding_path(self.root, first.mm_hash)}{more}: no encode instance ran it (this ec_consumer "
                "needs an ec_producer to have produced every multimodal item of the request first)",
            )
        for item in items:
            path = embedding_path(self.root, item.mm_hash)
            try:
                found = _read_hash(path)
            except OSError as exc:
                raise SimError(500, f"cannot load encoder output {path}: {exc}") from None
            if found != item.mm_hash:
                raise SimError(500, f"{path} is not the encoder output of mm_hash {item.mm_hash}")
