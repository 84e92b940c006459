"""The `motor_deploy_config.hardware_type` values motor accepts: pyMotor's machine names plus motor's own.

pyMotor's deployer knows the Atlas A2/A3 servers (inference `800I_*` and training `800T_*` variants) and the
A5 family named by the MindCluster accelerator-type label. motor adds `cpu` (local runs, the CI machine) and
`nvidia-gpu`. Each type names the Kubernetes extended resource its accelerators are requested as.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    name: str
    family: str
    resource: str | None  # the Kubernetes extended resource of one accelerator; None: nothing to request
    cluster_only: bool  # True: motor's local mode cannot drive these accelerators on this machine
    engines_as_root: bool = False  # the engine stack needs root (Ascend: driver files, CANN logs and caches)


_ASCEND_910 = "huawei.com/Ascend910"
_ASCEND_NPU = "huawei.com/npu"

_A5_TYPES = (
    "350-Atlas-8",
    "350-Atlas-16",
    "350-Atlas-4p-8",
    "350-Atlas-4p-16",
    "850-Atlas-8p-8",
    "850-SuperPod-Atlas-8",
    "950-SuperPod-Atlas-8",
)

HARDWARE: dict[str, Hardware] = {
    hardware.name: hardware
    for hardware in (
        Hardware("cpu", "motor: no accelerator", None, False),
        Hardware("nvidia-gpu", "motor: NVIDIA GPU", "nvidia.com/gpu", False),
        Hardware("800I_A2", "Atlas A2", _ASCEND_910, True, engines_as_root=True),
        Hardware("800T_A2", "Atlas A2", _ASCEND_910, True, engines_as_root=True),
        Hardware("800I_A3", "Atlas A3", _ASCEND_910, True, engines_as_root=True),
        Hardware("800T_A3", "Atlas A3", _ASCEND_910, True, engines_as_root=True),
        *(Hardware(name, "Atlas A5", _ASCEND_NPU, True, engines_as_root=True) for name in _A5_TYPES),
    )
}

DEFAULT_HARDWARE = "cpu"


def known_hardware() -> list[str]:
    return list(HARDWARE)


def engines_as_root(hardware_type: str) -> bool:
    hardware = HARDWARE.get(hardware_type)
    return hardware is not None and hardware.engines_as_root


def accelerator_resource(hardware_type: str) -> str | None:
    hardware = HARDWARE.get(hardware_type)
    return hardware.resource if hardware is not None else None
