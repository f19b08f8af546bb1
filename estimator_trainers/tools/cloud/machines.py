"""Machines: the Compute Engine types Vertex AI training offers, and AI Platform's names.

- `FAMILIES`, `MACHINE_TYPES`: what Vertex AI custom training offers.
- `LEGACY_MACHINE_TYPES`, `SCALE_TIERS`: AI Platform's machine names and
  scale tiers, and the Compute Engine machine (plus GPUs) each stands for.
- `GPU_FAMILIES`: which GPUs attach to which machines, and how many.
- `shape`: a machine's vCPUs and memory (Compute Engine's tables), which the
  Kubernetes targets request; `GKE_ACCELERATORS`: each GPU's GKE node label.
- `translate_machine`: a legacy or Compute Engine machine with its GPUs ->
  what Vertex AI runs; `prediction_machine`: the same for a version's
  nodes (`versions create --machine-type`, AI Platform Prediction's `mls1-*`). NVIDIA K80s are retired on Vertex AI: a K80 request
  becomes the same number of T4s, or V100s for 8 (an N1 machine takes at
  most 4 T4s).

The Compute Engine types Vertex AI custom training offers:

A misspelt machine type (`n1-standard-5`, `n9-superduper-1024`) would
otherwise be accepted here and refused by Vertex AI only at job creation, or
worse, after the other pools were provisioned. The table lists the families
and sizes of Vertex AI's "Configure compute resources for custom training"
page (CPU families; GPU families with their `-<N>g` sizes). A family Vertex
AI adds later needs a line here.
"""
import difflib
import re
from typing import Any, Collection, Dict, Iterable, Optional, Tuple

# family -> sizes (the part after the family's last dash).
FAMILIES = {
    'e2-standard': (4, 8, 16, 32),
    'e2-highmem': (2, 4, 8, 16),
    'e2-highcpu': (16, 32),
    'n1-standard': (4, 8, 16, 32, 64, 96),
    'n1-highmem': (2, 4, 8, 16, 32, 64, 96),
    'n1-highcpu': (16, 32, 64, 96),
    'n2-standard': (4, 8, 16, 32, 48, 64, 80),
    'n2-highmem': (2, 4, 8, 16, 32, 48, 64, 80),
    'n2-highcpu': (16, 32, 48, 64, 80),
    'n2d-standard': (4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    'n2d-highmem': (2, 4, 8, 16, 32, 48, 64, 80, 96),
    'n2d-highcpu': (16, 32, 48, 64, 80, 96, 128, 224),
    'c2-standard': (4, 8, 16, 30, 60),
    'c2d-standard': (2, 4, 8, 16, 32, 56, 112),
    'c2d-highmem': (2, 4, 8, 16, 32, 56, 112),
    'c2d-highcpu': (2, 4, 8, 16, 32, 56, 112),
    'c3-standard': (4, 8, 22, 44, 88, 176),
    'c3-highmem': (4, 8, 22, 44, 88, 176),
    'c3-highcpu': (4, 8, 22, 44, 88, 176),
    'm1-ultramem': (40, 80, 160),
    'm1-megamem': (96,),
    'g2-standard': (4, 8, 12, 16, 24, 32, 48, 96),
    'a2-highgpu': ('1g', '2g', '4g', '8g'),
    'a2-megagpu': ('16g',),
    'a2-ultragpu': ('1g', '2g', '4g', '8g'),
    'a3-highgpu': ('1g', '2g', '4g', '8g'),
    'a3-megagpu': ('8g',),
    'a3-ultragpu': ('8g',),
}
# family -> GiB of memory per vCPU (Compute Engine's machine family pages; their
# "GB" are GiB).
MEMORY_PER_VCPU = {
    'e2-standard': 4, 'e2-highmem': 8, 'e2-highcpu': 1,
    'n1-standard': 3.75, 'n1-highmem': 6.5, 'n1-highcpu': 0.9,
    'n2-standard': 4, 'n2-highmem': 8, 'n2-highcpu': 1,
    'n2d-standard': 4, 'n2d-highmem': 8, 'n2d-highcpu': 1,
    'c2-standard': 4, 'c2d-standard': 4, 'c2d-highmem': 8, 'c2d-highcpu': 2,
    'c3-standard': 4, 'c3-highmem': 8, 'c3-highcpu': 2, 'g2-standard': 4,
}
# Machines whose memory is not a multiple of their vCPUs: (vCPUs, GiB).
FIXED_SHAPES = {
    'm1-ultramem-40': (40, 961), 'm1-ultramem-80': (80, 1922),
    'm1-ultramem-160': (160, 3844), 'm1-megamem-96': (96, 1433.6),
    'a2-highgpu-1g': (12, 85), 'a2-highgpu-2g': (24, 170), 'a2-highgpu-4g': (48, 340),
    'a2-highgpu-8g': (96, 680), 'a2-megagpu-16g': (96, 1360),
    'a2-ultragpu-1g': (12, 170), 'a2-ultragpu-2g': (24, 340),
    'a2-ultragpu-4g': (48, 680), 'a2-ultragpu-8g': (96, 1360),
    'a3-highgpu-1g': (26, 234), 'a3-highgpu-2g': (52, 468), 'a3-highgpu-4g': (104, 936),
    'a3-highgpu-8g': (208, 1872), 'a3-megagpu-8g': (208, 1872),
    'a3-ultragpu-8g': (224, 2952),
}
# Vertex AI's GPU names -> GKE's node label `cloud.google.com/gke-accelerator`.
GKE_ACCELERATORS = {
    'NVIDIA_TESLA_T4': 'nvidia-tesla-t4', 'NVIDIA_TESLA_P4': 'nvidia-tesla-p4',
    'NVIDIA_TESLA_P100': 'nvidia-tesla-p100', 'NVIDIA_TESLA_V100': 'nvidia-tesla-v100',
    'NVIDIA_TESLA_A100': 'nvidia-tesla-a100', 'NVIDIA_A100_80GB': 'nvidia-a100-80gb',
    'NVIDIA_L4': 'nvidia-l4', 'NVIDIA_H100_80GB': 'nvidia-h100-80gb',
    'NVIDIA_H100_MEGA_80GB': 'nvidia-h100-mega-80gb',
    'NVIDIA_H200_141GB': 'nvidia-h200-141gb',
}


def shape(machine_type: str) -> Tuple[float, float]:
    """`(vCPUs, GiB of memory)` of a Vertex AI training machine (`MACHINE_TYPES`)."""
    if machine_type in FIXED_SHAPES:
        return FIXED_SHAPES[machine_type]
    family, _, size = machine_type.rpartition('-')
    return int(size), int(size) * MEMORY_PER_VCPU[family]


# Longer names are not compared (difflib's time grows with the length squared).
_MAX_NAME_CHARS = 40
MACHINE_TYPES = tuple(sorted('%s-%s' % (family, size)
                             for family, sizes in FAMILIES.items() for size in sizes))


def unknown_reason(machine_type: str, other_names: Collection[str] = ()) -> Optional[str]:
    """Why `machine_type` is not a Vertex AI training machine, or None if it is.

    The reason names the closest known type (`difflib`), among the table and
    `other_names` (e.g. the legacy AI Platform names).
    """
    if machine_type in MACHINE_TYPES:
        return None
    if len(machine_type) > _MAX_NAME_CHARS:  # no closest name worth comparing
        return 'unknown machine type %r...: longer than any machine type' % (
            machine_type[:_MAX_NAME_CHARS])
    family, _, _ = machine_type.rpartition('-')
    if family in FAMILIES:
        return ('unknown machine type %r: Vertex AI offers %s in sizes %s'
                % (machine_type, family, ', '.join(str(s) for s in FAMILIES[family])))
    candidates = MACHINE_TYPES + tuple(other_names)
    closest = difflib.get_close_matches(machine_type, candidates, n=1, cutoff=0.0)
    return ('unknown machine type %r (closest: %s; Vertex AI offers the families '
            '%s, or a legacy AI Platform name)'
            % (machine_type, closest[0], ', '.join(sorted(FAMILIES))))


K80 = 'NVIDIA_TESLA_K80'

# Legacy name -> (Compute Engine machine type, GPU type or None, GPU count).
# The ml v1 reference defines each GPU name as a CPU name plus GPUs
# ("standard_gpu: a machine equivalent to standard that also includes a
# single NVIDIA Tesla K80 GPU"), so they share its machine type.
LEGACY_MACHINE_TYPES = {
    'standard': ('n1-standard-4', None, 0),
    'large_model': ('n1-highmem-8', None, 0),
    # AI Platform ran n1-highcpu-8; Vertex AI training offers n1-highcpu from 16.
    'complex_model_s': ('n1-highcpu-16', None, 0),
    'complex_model_m': ('n1-highcpu-16', None, 0),
    'complex_model_l': ('n1-highcpu-32', None, 0),
    'standard_gpu': ('n1-standard-4', K80, 1),
    'complex_model_m_gpu': ('n1-highcpu-16', K80, 4),
    'complex_model_l_gpu': ('n1-highcpu-32', K80, 8),
    'standard_p100': ('n1-standard-4', 'NVIDIA_TESLA_P100', 1),
    'complex_model_m_p100': ('n1-highcpu-16', 'NVIDIA_TESLA_P100', 4),
    'standard_v100': ('n1-standard-4', 'NVIDIA_TESLA_V100', 1),
    'large_model_v100': ('n1-highmem-8', 'NVIDIA_TESLA_V100', 1),
    'complex_model_m_v100': ('n1-highcpu-16', 'NVIDIA_TESLA_V100', 4),
    'complex_model_l_v100': ('n1-highcpu-32', 'NVIDIA_TESLA_V100', 8),
}

# Scale tier -> the CUSTOM fields it stands for.
SCALE_TIERS: Dict[str, Dict[str, Any]] = {
    'BASIC': {'masterType': 'standard'},
    'BASIC_GPU': {'masterType': 'standard_gpu'},
    'STANDARD_1': {'masterType': 'complex_model_s',
                   'workerType': 'complex_model_s', 'workerCount': 4,
                   'parameterServerType': 'standard', 'parameterServerCount': 3},
    'PREMIUM_1': {'masterType': 'complex_model_m',
                  'workerType': 'complex_model_m', 'workerCount': 19,
                  'parameterServerType': 'large_model', 'parameterServerCount': 11},
}
CUSTOM = 'CUSTOM'
TPU_REASON = ('TPUs need TPUEstimator; these Estimator trainers run on CPUs '
               'and GPUs')

# Machine type prefix -> {GPU type: allowed counts}. Families other than n1
# exist only with GPUs attached; a `-<N>g` suffix fixes the count to N.
GPU_FAMILIES = (
    ('n1-', {'NVIDIA_TESLA_T4': (1, 2, 4), 'NVIDIA_TESLA_P4': (1, 2, 4),
             'NVIDIA_TESLA_P100': (1, 2, 4), 'NVIDIA_TESLA_V100': (1, 2, 4, 8),
             K80: (1, 2, 4, 8)}),
    ('a2-highgpu-', {'NVIDIA_TESLA_A100': (1, 2, 4, 8)}),
    ('a2-megagpu-', {'NVIDIA_TESLA_A100': (16,)}),
    ('a2-ultragpu-', {'NVIDIA_A100_80GB': (1, 2, 4, 8)}),
    ('g2-standard-', {'NVIDIA_L4': (1, 2, 4, 8)}),
    ('a3-highgpu-', {'NVIDIA_H100_80GB': (1, 2, 4, 8)}),
    ('a3-megagpu-', {'NVIDIA_H100_MEGA_80GB': (8,)}),
    ('a3-ultragpu-', {'NVIDIA_H200_141GB': (8,)}),
)
GPU_TYPES = sorted({gpu for _, gpus in GPU_FAMILIES for gpu in gpus})
UNSUPPORTED_GPUS = {
    'NVIDIA_B200': 'needs CUDA 12.8; TensorFlow 2.15 is built for CUDA 12.2',
    'NVIDIA_GB200': 'needs CUDA 12.8; TensorFlow 2.15 is built for CUDA 12.2',
    'NVIDIA_RTX_PRO_6000': 'needs CUDA 12.8; TensorFlow 2.15 is built for CUDA 12.2',
    'TPU_V2': TPU_REASON, 'TPU_V3': TPU_REASON, 'TPU_V2_POD': TPU_REASON,
    'TPU_V3_POD': TPU_REASON, 'TPU_V4_POD': TPU_REASON,
    'TPU_V5_LITEPOD': TPU_REASON,
}


# `(gpu_type or None, gpu_count, note or None)`: the GPUs a machine runs.
Gpus = Tuple[Optional[str], int, Optional[str]]
# `(machine_type, gpu_type or None, gpu_count, note or None)`.
Machine = Tuple[str, Optional[str], int, Optional[str]]


class MachineError(ValueError):
    """A machine type or GPU request that Vertex AI cannot run.

    `on_accelerator` says whether the `acceleratorConfig` (rather than the
    machine type) is the field to blame.
    """

    def __init__(self, message: str, on_accelerator: bool = True) -> None:
        super().__init__(message)
        self.on_accelerator = on_accelerator


def translate_machine(machine: str, accelerator_type: Optional[str] = None,
                      accelerator_count: int = 0) -> Machine:
    """Legacy or Compute Engine machine + GPUs -> Vertex AI (machine, GPU, count).

    Args:
      machine: a legacy name (`complex_model_m_gpu`) or a Compute Engine type.
      accelerator_type, accelerator_count: an `acceleratorConfig` for a
        Compute Engine type (legacy names carry their own GPUs).

    Returns:
      `(machine_type, gpu_type or None, gpu_count, note or None)`; the note
      says when a retired GPU was replaced.

    Raises:
      MachineError: with a message the caller prefixes with the field name.
    """
    if machine in LEGACY_MACHINE_TYPES:
        if accelerator_type:
            raise MachineError(
                'legacy machine type %r has fixed GPUs; use a Compute Engine '
                'machine type (e.g. n1-standard-8) with acceleratorConfig' % machine)
        machine_type, accelerator_type, accelerator_count = LEGACY_MACHINE_TYPES[machine]
    elif machine == 'cloud_tpu':
        raise MachineError('cloud_tpu: %s' % TPU_REASON, on_accelerator=False)
    else:
        reason = unknown_reason(machine, LEGACY_MACHINE_TYPES)
        if reason:
            raise MachineError(reason, on_accelerator=False)
        machine_type = machine
    return (machine_type,) + attach_gpus(machine, machine_type, accelerator_type,
                                         accelerator_count)


def attach_gpus(machine: str, machine_type: str, accelerator_type: Optional[str],
                accelerator_count: int) -> Gpus:
    """The GPUs a Compute Engine `machine_type` (named `machine` by the user) runs.

    Returns:
      `(gpu_type or None, gpu_count, note or None)`; the note says when a
      retired GPU was replaced.

    Raises:
      MachineError: the GPUs do not attach to the machine, or it needs some.
    """
    family = next(((prefix, gpus) for prefix, gpus in GPU_FAMILIES
                   if machine_type.startswith(prefix)), None)
    if not accelerator_type:
        if family and family[0] != 'n1-':
            raise MachineError('%s needs an acceleratorConfig with %s'
                               % (machine_type, ' or '.join(family[1])), on_accelerator=False)
        return None, 0, None
    if family is None:
        raise MachineError('%s takes no GPUs (GPUs attach to %s machines)'
                           % (machine_type, ', '.join(p + '*' for p, _ in GPU_FAMILIES)))
    prefix, gpus = family
    if accelerator_type not in gpus:
        raise MachineError('%s does not attach to %s (%s* machines take %s)'
                           % (accelerator_type, machine_type, prefix, ', '.join(gpus)))
    if accelerator_count not in gpus[accelerator_type]:
        raise MachineError('%s attaches %s at a time to %s* machines, not %d'
                           % (accelerator_type, _or(gpus[accelerator_type]), prefix,
                              accelerator_count))
    fixed = re.search(r'-(\d+)g$', machine_type)
    if fixed and int(fixed.group(1)) != accelerator_count:
        raise MachineError('%s comes with exactly %s GPUs, not %d'
                           % (machine_type, fixed.group(1), accelerator_count))
    note = None
    if accelerator_type == K80:
        replacement = 'NVIDIA_TESLA_T4' if accelerator_count <= 4 else 'NVIDIA_TESLA_V100'
        note = ('%s: NVIDIA_TESLA_K80 is retired on Vertex AI; using %d x %s'
                % (machine, accelerator_count, replacement))
        accelerator_type = replacement
    return accelerator_type, accelerator_count, note


# Vertex AI online prediction takes the training families and also their
# 2-vCPU (and small high-CPU) sizes; AI Platform Prediction's own `mls1-*`
# machines have no Vertex AI equivalent: the Compute Engine type of at least
# their vCPUs serves instead.
PREDICTION_MACHINE_TYPE = 'n1-standard-2'
_PREDICTION_SIZES = {'e2-standard': (2,), 'e2-highcpu': (2, 4, 8), 'n1-standard': (2,),
                     'n1-highcpu': (2, 4, 8), 'n2-standard': (2,), 'n2-highcpu': (2, 4, 8),
                     'n2d-standard': (2,), 'n2d-highcpu': (2, 4, 8)}
LEGACY_PREDICTION_MACHINE_TYPES = {'mls1-c1-m2': 'n1-standard-2',
                                   'mls1-c4-m2': 'n1-standard-4'}


def prediction_machine(machine: str, accelerator_type: Optional[str] = None,
                       accelerator_count: int = 0) -> Machine:
    """`--machine-type` (and `--accelerator`) of a version -> what serves it on Vertex AI.

    Returns:
      `(machine_type, gpu_type or None, gpu_count, note or None)`.

    Raises:
      MachineError: an unknown machine type, or GPUs that do not attach to it.
    """
    note = None
    machine_type = LEGACY_PREDICTION_MACHINE_TYPES.get(machine)
    if machine_type:
        note = ('--machine-type %s: AI Platform Prediction\'s machine; Vertex AI serves on '
                '%s instead' % (machine, machine_type))
    else:
        family, _, size = machine.rpartition('-')
        extra = _PREDICTION_SIZES.get(family, ())
        if not (size.isdigit() and int(size) in extra):
            reason = unknown_reason(machine, tuple(LEGACY_PREDICTION_MACHINE_TYPES) + tuple(
                '%s-%d' % (f, n) for f, sizes in _PREDICTION_SIZES.items() for n in sizes))
            if reason and family in _PREDICTION_SIZES:
                reason = 'unknown machine type %r: Vertex AI serves on %s in sizes %s' % (
                    machine, family, ', '.join(str(n) for n in sorted(
                        set(FAMILIES[family]) | set(extra))))
            if reason:
                raise MachineError(reason, on_accelerator=False)
        machine_type = machine
    gpu_type, gpu_count, gpu_note = attach_gpus(machine, machine_type, accelerator_type,
                                                accelerator_count)
    return machine_type, gpu_type, gpu_count, '; '.join(filter(None, (note, gpu_note))) or None


def _or(values: Iterable[object]) -> str:
    texts = [str(v) for v in values]
    return texts[0] if len(texts) == 1 else '%s or %s' % (', '.join(texts[:-1]), texts[-1])
