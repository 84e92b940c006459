"""The parts a scheduling profile is made of (the Gateway API inference extension's plugin kinds):

- `PoolFilter`: decides from an endpoint's registration alone (role, status), so it runs when the instance set
  changes and builds the role's pool; requests never pay for it.
- `Filter`: narrows the candidates of one decision (`PointFilter` judges each endpoint on its own, a
  `LoadBoundFilter` by a load limit the least loaded candidate sets).
- `Scorer`: rates each candidate 0–1; a profile adds them up with weights. A `sparse` scorer rates all but a
  few endpoints 0 and can rate those few without looking at the others (`sparse_scores`); a `binary` one gives
  only 0 or 1. Such a scorer combined with the load scorer can run on the heap. A scorer that is also a
  `PickObserver` learns from each decision.
- `Picker`: chooses one candidate from the weighted totals.

Scorers must give a value that depends only on the endpoint and the request (never on the other candidates):
then a profile gives the same answer over any subset that contains the winner, which is what the compiled
deciders in `motor.coordinator.scheduling.compiled` rely on.
"""

from abc import ABC, abstractmethod
from typing import ClassVar

from motor.coordinator.registry import Target
from motor.coordinator.scheduling.demand import Demand
from motor.coordinator.scheduling.load import EndpointLoad, Pool

Exclusions = set[str] | frozenset[str]
"""Instance ids that already failed this request."""


class PoolFilter(ABC):
    name: ClassVar[str]

    @abstractmethod
    def keep(self, target: Target) -> bool: ...


class Filter(ABC):
    name: ClassVar[str]

    @abstractmethod
    def apply(
        self, candidates: list[EndpointLoad], demand: Demand, exclude: Exclusions
    ) -> list[EndpointLoad]: ...


class PointFilter(Filter):
    @abstractmethod
    def keep(self, endpoint: EndpointLoad, demand: Demand, exclude: Exclusions) -> bool: ...

    def apply(
        self, candidates: list[EndpointLoad], demand: Demand, exclude: Exclusions
    ) -> list[EndpointLoad]:
        return [endpoint for endpoint in candidates if self.keep(endpoint, demand, exclude)]


class LoadBoundFilter(Filter):
    """Admits the endpoints whose load stays within a limit set by the least loaded candidate, which always
    passes: such a filter cannot change a load-only winner, and judges a candidate by one number."""

    @abstractmethod
    def limit(self, least_load: float, demand: Demand) -> float:
        """The most load an endpoint may carry and pass, given the least loaded candidate's (≥ that load)."""

    def apply(
        self, candidates: list[EndpointLoad], demand: Demand, exclude: Exclusions
    ) -> list[EndpointLoad]:
        if not candidates:
            return candidates
        limit = self.limit(min(endpoint.tokens + endpoint.kv for endpoint in candidates), demand)
        return [endpoint for endpoint in candidates if endpoint.tokens + endpoint.kv <= limit]


class Scorer(ABC):
    name: ClassVar[str]
    sparse: ClassVar[bool] = False
    binary: ClassVar[bool] = False

    @abstractmethod
    def score(self, candidates: list[EndpointLoad], demand: Demand) -> list[float]: ...

    def sparse_scores(self, pool: Pool, demand: Demand) -> dict[EndpointLoad, float]:
        """For sparse scorers: the score of every endpoint of `pool` this request rates above 0."""
        raise NotImplementedError(f"{self.name} is not a sparse scorer")


class PickObserver(ABC):
    @abstractmethod
    def picked(self, endpoint: EndpointLoad, demand: Demand) -> None:
        """Called with the endpoint the profile chose for `demand`."""


class Picker(ABC):
    name: ClassVar[str]

    @abstractmethod
    def pick(self, candidates: list[EndpointLoad], totals: list[float]) -> EndpointLoad: ...
