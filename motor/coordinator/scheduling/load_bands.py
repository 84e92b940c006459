"""The endpoints of a pool sorted into load bands as bit masks, so that the least loaded member of any group of
endpoints (a mask over the KV index's slots, as `KvMatches` gives them) is found without looking at every member.

Bands have two levels: an octave of load (its bit length), and within it 64 bands (its next six bits; below 128
tokens a band is one exact load). Each octave and each band is one mask of the slots of the endpoints whose load is
in it. The least loaded member of a group is in the first octave the group's mask meets, in its first band the
mask meets: only the members in that band are compared, by (load, last pick) as the heap orders endpoints. Loads
that crowd into one octave still spread over its bands, and an octave the group misses costs one mask operation.
The bands follow every load change the heap sees (`BandedLoadHeap`); they are built again when the index gives its
slots out anew (an instance came or went), which the answer's `slot_version` tells.
"""

from bisect import insort
from collections.abc import Mapping

from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.plugins import Exclusions
from motor.kv.index import slots_of

FEW_MEMBERS = 4  # a group this small is compared member by member
BAND_BITS = 6  # bands per octave: 2**6

Band = tuple[int, int]  # (octave, band within it)


def load_band(load: float) -> Band:
    """(octave, band): both grow with load; 0 tokens is (0, 0)."""
    tokens = int(load)
    if tokens <= 0:
        return 0, 0
    octave = tokens.bit_length()
    return octave, tokens >> max(0, octave - 1 - BAND_BITS)


def _order(endpoint: EndpointLoad) -> tuple[float, int]:
    return endpoint.tokens + endpoint.kv, endpoint.last_pick


class LoadBands:
    def __init__(self) -> None:
        self._slots: Mapping[str, int] | None = None
        self._version = -1
        self._bit: dict[EndpointLoad, int] = {}
        self._band: dict[EndpointLoad, Band] = {}
        self._by_slot: dict[int, EndpointLoad] = {}
        self._octaves: dict[int, int] = {}  # octave -> mask
        self._bands: dict[Band, int] = {}  # band -> mask
        self._order: list[int] = []  # octaves holding endpoints, ascending
        self._band_order: dict[int, list[int]] = {}  # octave -> its bands holding endpoints, ascending

    def current(self, slots: Mapping[str, int], version: int) -> bool:
        return slots is self._slots and version == self._version

    def rebuild(self, endpoints: list[EndpointLoad], slots: Mapping[str, int], version: int) -> None:
        self._slots, self._version = slots, version
        for table in (self._bit, self._band, self._by_slot, self._octaves, self._bands, self._band_order):
            table.clear()
        self._order.clear()
        for endpoint in endpoints:
            slot = slots.get(endpoint.key)
            if slot is not None:
                self._bit[endpoint] = 1 << slot
                self._by_slot[slot] = endpoint
                self._enter(endpoint, load_band(endpoint.tokens + endpoint.kv))

    def moved(self, endpoint: EndpointLoad) -> None:
        """The endpoint's load changed."""
        band = self._band.get(endpoint)
        if band is None:
            return
        new = load_band(endpoint.tokens + endpoint.kv)
        if new != band:
            self._leave(endpoint, band)
            self._enter(endpoint, new)

    def least_loaded(self, members: int, exclude: Exclusions) -> EndpointLoad | None:
        """The member of the pool in `members` that comes first by (load, last pick), not in `exclude`."""
        if members.bit_count() <= FEW_MEMBERS:
            return self._first(members, exclude)
        octaves, bands = self._octaves, self._bands
        for octave in self._order:
            if not members & octaves[octave]:
                continue
            for band in self._band_order[octave]:
                hit = members & bands[(octave, band)]
                if hit and (found := self._first(hit, exclude)) is not None:
                    return found
        return None

    def _first(self, members: int, exclude: Exclusions) -> EndpointLoad | None:
        by_slot = self._by_slot
        candidates = [
            endpoint
            for slot in slots_of(members)
            if (endpoint := by_slot.get(slot)) is not None and endpoint.instance_id not in exclude
        ]
        return min(candidates, key=_order, default=None)

    def _enter(self, endpoint: EndpointLoad, band: Band) -> None:
        self._band[endpoint] = band
        bit = self._bit[endpoint]
        octave = band[0]
        if octave not in self._octaves:
            insort(self._order, octave)
            self._octaves[octave] = 0
            self._band_order[octave] = []
        self._octaves[octave] |= bit
        if band not in self._bands:
            insort(self._band_order[octave], band[1])
            self._bands[band] = 0
        self._bands[band] |= bit

    def _leave(self, endpoint: EndpointLoad, band: Band) -> None:
        keep = ~self._bit[endpoint]
        octave = band[0]
        if mask := self._bands[band] & keep:
            self._bands[band] = mask
        else:
            del self._bands[band]
            self._band_order[octave].remove(band[1])
        if mask := self._octaves[octave] & keep:
            self._octaves[octave] = mask
        else:
            del self._octaves[octave]
            del self._band_order[octave]
            self._order.remove(octave)


class BandedLoadHeap(LoadHeap):
    """The load heap, keeping its pool's load bands up to date on every load change it is told of."""

    def __init__(self, endpoints: list[EndpointLoad], bands: LoadBands) -> None:
        self.bands = bands
        super().__init__(endpoints)

    def update(self, endpoint: EndpointLoad) -> None:
        super().update(endpoint)
        self.bands.moved(endpoint)
