"""The endpoints of a pool sorted into load bands as bit masks, so that the least loaded member of any group of
endpoints (a mask over the KV index's slots, as `KvMatches` gives them) is found without looking at every member.

A band is an eighth of an octave of load (finer bands hold fewer endpoints to compare, coarser ones are fewer to
scan: on 1,000 endpoints an eighth was the faster of quarter, eighth, sixteenth); each band is one mask of the slots of the endpoints whose load is in it. The
least loaded member of a group is in the first band, in load order, that the group's mask meets: only the members
in that band are compared, by (load, last pick) as the heap orders endpoints. The bands follow every load change
the heap sees (`BandedLoadHeap`); they are built again when the index gives slots out anew (an instance came or
went), which the answer's `slot_version` tells.
"""

from bisect import insort
from collections.abc import Mapping

from motor.coordinator.scheduling.heap import LoadHeap
from motor.coordinator.scheduling.load import EndpointLoad
from motor.coordinator.scheduling.plugins import Exclusions
from motor.kv.index import slots_of

FEW_MEMBERS = 4  # a group this small is compared member by member


def load_band(load: float) -> int:
    """Bands an eighth of an octave wide, in load order: 0 for no load, 1, 2, 3 below 8 tokens, then 32, 33, ..."""
    tokens = int(load)
    if tokens <= 0:
        return 0
    width = tokens.bit_length()
    if width <= 3:
        return width
    return width << 3 | tokens >> (width - 4) & 7


def _order(endpoint: EndpointLoad) -> tuple[float, int]:
    return endpoint.tokens + endpoint.kv, endpoint.last_pick


class LoadBands:
    def __init__(self) -> None:
        self._slots: Mapping[str, int] | None = None
        self._version = -1
        self._bit: dict[EndpointLoad, int] = {}
        self._band: dict[EndpointLoad, int] = {}
        self._by_slot: dict[int, EndpointLoad] = {}
        self._masks: dict[int, int] = {}
        self._order: list[int] = []  # bands holding endpoints, ascending

    def current(self, slots: Mapping[str, int], version: int) -> bool:
        return slots is self._slots and version == self._version

    def rebuild(self, endpoints: list[EndpointLoad], slots: Mapping[str, int], version: int) -> None:
        self._slots, self._version = slots, version
        self._bit.clear()
        self._band.clear()
        self._by_slot.clear()
        self._masks.clear()
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
        masks = self._masks
        for band in self._order:
            found = self._first(members & masks[band], exclude)
            if found is not None:
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

    def _enter(self, endpoint: EndpointLoad, band: int) -> None:
        self._band[endpoint] = band
        mask = self._masks.get(band)
        if mask is None:
            insort(self._order, band)
            mask = 0
        self._masks[band] = mask | self._bit[endpoint]

    def _leave(self, endpoint: EndpointLoad, band: int) -> None:
        mask = self._masks[band] & ~self._bit[endpoint]
        if mask:
            self._masks[band] = mask
        else:
            del self._masks[band]
            self._order.remove(band)


class BandedLoadHeap(LoadHeap):
    """The load heap, keeping its pool's load bands up to date on every load change it is told of."""

    def __init__(self, endpoints: list[EndpointLoad], bands: LoadBands) -> None:
        self.bands = bands
        super().__init__(endpoints)

    def update(self, endpoint: EndpointLoad) -> None:
        super().update(endpoint)
        self.bands.moved(endpoint)
