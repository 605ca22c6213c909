"""Lane ops: Bridge's recipe functions, built offline and checked by Bridge's own runtime update.

``recipes.list`` enumerates the public ``*_config`` functions of ``megatron.bridge.recipes`` that return
a ``ConfigContainer``. ``recipes.run`` builds each one (the hub ids they name resolve to a stand-in
cache, see ``_standins.py``), writes Bridge's own config dump of it (``ConfigContainer.to_yaml``, the
serialization Bridge uses for ``run_config.yaml`` next to checkpoints), then runs
``runtime_config_update()`` on it and reports whether that raises. Run in the upstream interpreter
only (see ``worker.py``).

What the lane sets, per recipe, and reports in ``adjusted``: ``WORLD_SIZE`` (the GPU count in the
recipe's name, else TP*PP*CP); an existing empty directory as ``checkpoint.pretrained_checkpoint``
when a PEFT recipe leaves it unset; and the model features that need Transformer Engine (absent on
CPU) turned off before the update, on the object only (the dump keeps the recipe's values).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import pkgutil
import re
import sys
import time
import traceback
from pathlib import Path

import _standins  # the worker puts the ops folder on sys.path

_GPUS = re.compile(r"_(\d+)gpus?_")
#: Model features that need Transformer Engine; set off on the validated object (the lane has no TE).
TE_FEATURES = {"transformer_impl": "local", "apply_rope_fusion": False, "gradient_accumulation_fusion": False,
               "bias_activation_fusion": False, "masked_softmax_fusion": False, "persist_layer_norm": False,
               "cross_entropy_loss_fusion": False, "moe_permute_fusion": False}


def _recipe_functions() -> dict[str, object]:
    import megatron.bridge.recipes as package

    out: dict[str, object] = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if ".utils" in info.name or info.name.endswith("run_plugins"):
            continue
        module = importlib.import_module(info.name)
        for name, fn in vars(module).items():
            if (inspect.isfunction(fn) and fn.__module__ == module.__name__ and name.endswith("_config")
                    and not name.startswith("_") and "ConfigContainer" in str(inspect.signature(fn).return_annotation)):
                out[f"{module.__name__}.{name}"] = fn
    return dict(sorted(out.items()))


_HEX40 = re.compile(r"[0-9a-f]{40}")


def _pinned_revisions() -> dict[str, set[str]]:
    """Hub id -> the commits recipe modules pin for it (``_X_REVISION`` next to ``_X_ID``)."""
    out: dict[str, set[str]] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("megatron.bridge.recipes."):
            continue
        for const, value in vars(module).items():
            if const.endswith("_REVISION") and isinstance(value, str) and _HEX40.fullmatch(value):
                hub = getattr(module, const[: -len("REVISION")] + "ID", None)
                if isinstance(hub, str):
                    out.setdefault(hub, set()).add(value)
    return out


def op_list() -> list[dict]:
    """Every recipe function: qualified name, source file (relative to the package) and line."""
    import megatron.bridge

    root = Path(megatron.bridge.__file__).resolve().parent
    out = []
    for qualname, fn in _recipe_functions().items():
        source = Path(inspect.getsourcefile(fn)).resolve().relative_to(root.parent.parent)
        out.append({"recipe": qualname, "source": f"{source}:{inspect.getsourcelines(fn)[1]}"})
    return out


def packing_of(dataset) -> dict:
    """The packing settings a built dataset config turns on (by Bridge's field names)."""
    kind = type(dataset).__name__ if dataset is not None else None
    out = {"dataset_class": kind, "offline": bool(getattr(dataset, "enable_offline_packing", False)),
           "in_batch": bool(getattr(dataset, "enable_in_batch_packing", False)),
           "deferred": bool(getattr(dataset, "defer_in_batch_packing_to_step", False)),
           "energon_packing_buffer_size": None}
    if kind == "EnergonDatasetConfig" or "Energon" in str(kind):
        out["energon_packing_buffer_size"] = getattr(dataset, "packing_buffer_size", None)
    out["packs"] = out["offline"] or out["in_batch"] or out["energon_packing_buffer_size"] is not None
    return out


def _transformer_engine_off(cfg) -> list[str]:
    """Turn off, on the object to be validated, what needs Transformer Engine (absent in the lane); what changed."""
    changed = []
    for field, value in TE_FEATURES.items():
        if hasattr(cfg.model, field) and getattr(cfg.model, field) != value:
            changed.append(f"model.{field}={getattr(cfg.model, field)!r}")
            setattr(cfg.model, field, value)
    if getattr(cfg.optimizer, "use_precision_aware_optimizer", False):  # needs TE's FusedAdam
        import torch

        changed.append("optimizer.use_precision_aware_optimizer=True (and its reduced-precision dtypes)")
        cfg.optimizer.use_precision_aware_optimizer = False
        for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if hasattr(cfg.optimizer, name):
                setattr(cfg.optimizer, name, torch.float32)
    comm = getattr(cfg, "comm_overlap", None)
    if comm is not None and getattr(comm, "defer_embedding_wgrad_compute", None):  # needs gradient_accumulation_fusion
        changed.append("comm_overlap.defer_embedding_wgrad_compute=True")
        comm.defer_embedding_wgrad_compute = False
    mp = cfg.mixed_precision
    low = mp if isinstance(mp, str) else (mp is not None and (getattr(mp, "fp8", None) or getattr(mp, "fp4", None)))
    if low and (not isinstance(mp, str) or "fp8" in mp or "fp4" in mp):  # FP8/FP4 recipes need TE
        changed.append(f"mixed_precision={mp if isinstance(mp, str) else type(mp).__name__} -> bf16_mixed")
        cfg.mixed_precision = "bf16_mixed"
        for name in ("moe_router_padding_for_quantization", "moe_router_padding_for_fp8"):  # FP8/FP4 only
            if getattr(cfg.model, name, False):
                changed.append(f"model.{name}=True")
                setattr(cfg.model, name, False)
    if getattr(cfg.model, "dsa_kernel_backend", "none") not in (None, "none"):  # fused DSA kernels need CUDA
        changed.append(f"model.dsa_kernel_backend={cfg.model.dsa_kernel_backend!r} -> 'none' (PyTorch fallback)")
        cfg.model.dsa_kernel_backend = "none"
    return changed


#: The GPU a recipe's name targets, as ``torch.cuda.get_device_properties`` would describe it (name, major, minor).
GPUS = {"h100": ("NVIDIA H100 80GB HBM3", 9, 0), "gb200": ("NVIDIA GB200", 10, 0), "gb300": ("NVIDIA GB300", 10, 3)}


class _Device:
    def __init__(self, name: str, major: int, minor: int) -> None:
        self.name, self.major, self.minor = name, major, minor
        self.total_memory, self.multi_processor_count = 80 * 2**30, 132


@contextlib.contextmanager
def _stand_in_gpu(qualname: str, notes: list[str]):
    """Recipes and Bridge's checks ask CUDA which GPU this is (the flex MoE dispatcher's backend check): answer
    with the hardware the recipe's module names (h100 when it names none). The lane has no GPU."""
    import torch

    kind = next((k for k in GPUS if f".{k}." in qualname), "h100")
    name, major, minor = GPUS[kind]
    saved = torch.cuda.get_device_properties, torch.cuda.get_device_capability
    used: list[bool] = []

    def properties(*_a, **_k):
        used.append(True)
        return _Device(name, major, minor)

    def capability(*_a, **_k):
        used.append(True)
        return (major, minor)

    torch.cuda.get_device_properties, torch.cuda.get_device_capability = properties, capability
    try:
        yield
    finally:
        torch.cuda.get_device_properties, torch.cuda.get_device_capability = saved
        if used:
            notes.append(f"CUDA device described as {name} (compute capability {major}.{minor})")


@contextlib.contextmanager
def _stand_in_te_version(cfg, notes: list[str]):
    """Bridge asserts TE >= 2.7 for overlap_grad_reduce with delay_wgrad_compute; the lane has no TE, so that
    version check (only that one) answers as with TE 2.7 installed."""
    from megatron.bridge.training import comm_overlap

    saved = comm_overlap.is_te_min_version
    comm = getattr(cfg, "comm_overlap", None)
    if comm is not None and getattr(comm, "delay_wgrad_compute", None):
        comm_overlap.is_te_min_version = lambda *_a, **_k: True
        notes.append("Transformer Engine version checks of comm_overlap answered as TE 2.7")
    try:
        yield
    finally:
        comm_overlap.is_te_min_version = saved


def _world_size(name: str, model) -> tuple[int, str]:
    match = _GPUS.search(name)
    if match:
        return int(match.group(1)), "the GPU count in the recipe's name"
    size = 1
    for field in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        size *= int(getattr(model, field, 1) or 1)
    return size, "TP*PP*CP (the name gives no GPU count)"


def _run_one(qualname: str, fn, out_dir: Path, scratch: Path) -> dict:
    entry: dict = {"recipe": qualname, "name": qualname.rsplit(".", 1)[1], "adjusted": []}
    with _stand_in_gpu(qualname, entry["adjusted"]):
        return _build_dump_update(fn, entry, out_dir, scratch)


def _build_dump_update(fn, entry: dict, out_dir: Path, scratch: Path) -> dict:
    from megatron.bridge.training.config import runtime_config_update

    short = entry["name"]
    start = time.perf_counter()
    cwd = os.getcwd()
    try:
        os.chdir("/")  # recipes put their output folders under the working directory: keep them machine-neutral
        cfg = fn()
    except Exception as exc:
        entry.update(built=False, build_error=f"{type(exc).__name__}: {str(exc)[:500]}")
        entry["seconds"] = round(time.perf_counter() - start, 3)
        return entry
    finally:
        os.chdir(cwd)
    entry["built"] = True
    entry["packing"] = packing_of(getattr(cfg, "dataset", None))
    model = cfg.model
    world, why = _world_size(short, model)
    os.environ["WORLD_SIZE"] = str(world)
    entry["world_size"] = world
    entry["adjusted"].append(f"WORLD_SIZE={world} ({why})")
    dump = out_dir / f"{short}.yaml"
    try:
        cfg.to_yaml(str(dump))
        entry["dump"] = dump.name
    except Exception as exc:
        entry["dump_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    if getattr(cfg, "peft", None) is not None:
        ckpt = cfg.checkpoint
        if not ckpt.pretrained_checkpoint or not Path(str(ckpt.pretrained_checkpoint)).exists():
            target = scratch / "pretrained" / short
            target.mkdir(parents=True, exist_ok=True)
            entry["adjusted"].append(f"checkpoint.pretrained_checkpoint: {ckpt.pretrained_checkpoint!r} -> an "
                                     "existing empty directory")
            ckpt.pretrained_checkpoint = str(target)
    turned_off = _transformer_engine_off(cfg)
    if turned_off:
        entry["adjusted"].append("Transformer Engine features off for the update: " + ", ".join(turned_off))
    try:
        with _stand_in_te_version(cfg, entry["adjusted"]):
            runtime_config_update(cfg)
        entry["raises"] = False
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        entry.update(raises=True, type=type(exc).__name__, message=str(exc)[:2000], where=frames[-1].name,
                     stack=[f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-6:]])
    entry["seconds"] = round(time.perf_counter() - start, 3)
    return entry


def op_run(out_dir: str, recipes: list[str] | None = None) -> dict:
    """Build, dump and update every recipe (or those named); per-recipe results plus stand-in problems."""
    functions = _recipe_functions()  # imports every recipe module
    problems = _standins.write_cache(_pinned_revisions())
    os.environ.setdefault("MEGATRON_CONFIG_LOCK_DIR", str(Path(os.environ["HF_HOME"]) / "locks"))
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / (target.name + "-scratch")
    wanted = recipes if recipes is not None else list(functions)
    environ = dict(os.environ)
    results = []  # each recipe sees the environment as it was: runtime_config_update writes the recipe's env vars
    for qualname in wanted:
        try:
            results.append(_run_one(qualname, functions[qualname], target, scratch))
        finally:
            os.environ.clear()
            os.environ.update(environ)
    return {"recipes": results, "standin_problems": problems}


def op_fill_step(lengths: list[int], max_seq_length: int, packed_sequence_size: int,
                 packing_algorithm: str = "first_fit_shuffle", seed: int = 0) -> dict:
    """Bridge's offline packing steps as ``prepare_gpt_sft_packed_data`` runs them (histogram up to
    ``max_seq_length``, bins of ``packed_sequence_size``, fill) on samples of the given token counts."""
    import numpy as np
    from megatron.bridge.data.packing.algorithms import create_hist, create_packing_strategy, fill_packing_strategy

    dataset = [{"input_ids": list(range(n)), "loss_mask": [True] * n} for n in lengths]
    np.random.seed(seed)
    try:
        sequences, histogram = create_hist(dataset, max_seq_length)
        assignments, _ = create_packing_strategy(histogram, packed_sequence_size, packing_algorithm)
        packs = fill_packing_strategy(assignments, sequences, packed_sequence_size, 0)
    except Exception as exc:
        return {"raises": True, "type": type(exc).__name__, "message": str(exc)[:500],
                "where": traceback.extract_tb(exc.__traceback__)[-1].name}
    return {"raises": False, "packs": len(packs)}
