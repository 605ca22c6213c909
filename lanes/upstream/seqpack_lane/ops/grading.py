"""Lane ops for grading eval artifacts and re-deriving eval ground truth with the released upstream.

Run in the upstream interpreter only (see ``worker.py``); never imports seqpack. Every op takes a list of
cases and answers one result per case, in order; an upstream exception is that case's answer
(``{"raises": True, "type", "message", "where"}``), never the op's failure.

* ``grading.recipe_overrides``: build a megatron-bridge 0.6.2 recipe function (hub ids resolve to the
  stand-in cache of ``_standins.py``, as ``recipes.run`` does), apply an agent's overrides (dotted
  attribute paths and JSON values, parsed from its ``override.py`` on seqpack's side, never executed),
  run ``runtime_config_update`` and read back the fields the task asks about;
* ``grading.source_files``: the text of files of the installed ``megatron.bridge`` / ``megatron.core``
  packages with their versions, so anchored facts are re-derived from what users install.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import traceback
from pathlib import Path

import _standins  # the worker puts the ops folder on sys.path
import recipes as _recipes  # the recipe ops' helpers (stand-in GPU, TE features off); a module of this folder

_PACKAGES = {"megatron/bridge": "megatron-bridge", "megatron/core": "megatron-core"}


def _raised(exc: BaseException) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    return {"raises": True, "type": type(exc).__name__, "message": str(exc)[:2000],
            "where": frames[-1].name if frames else "",
            "stack": [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-4:]]}


def _resolve(obj, dotted: str):
    parts = dotted.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    return obj, parts[-1]


def _plain(value):
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def _apply(cfg, assignments: list) -> None:
    for dotted, value in assignments:
        owner, name = _resolve(cfg, dotted)
        if not hasattr(owner, name):
            raise AttributeError(f"{type(owner).__name__} has no field {name!r} ({dotted})")
        setattr(owner, name, value)


def _one_recipe(case: dict, scratch: Path) -> dict:
    from megatron.bridge.training.config import runtime_config_update

    module, _, name = case["recipe"].rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    cwd = os.getcwd()
    try:
        os.chdir("/")  # recipes put their output folders under the working directory
        cfg = fn()
    except Exception as exc:  # noqa: BLE001 - the recipe itself does not build here
        return {"built": False, **_raised(exc)}
    finally:
        os.chdir(cwd)
    answer: dict = {"built": True, "adjusted": []}
    try:
        _apply(cfg, case.get("assignments", []))
    except Exception as exc:  # noqa: BLE001 - an override naming a field the release lacks
        return {**answer, "stage": "override", **_raised(exc)}
    world, _why = _recipes._world_size(name, cfg.model)
    os.environ["WORLD_SIZE"] = str(case.get("world_size") or world)
    answer["world_size"] = int(os.environ["WORLD_SIZE"])
    if getattr(cfg, "peft", None) is not None:
        ckpt = cfg.checkpoint
        if not ckpt.pretrained_checkpoint or not Path(str(ckpt.pretrained_checkpoint)).exists():
            target = scratch / "pretrained" / name
            target.mkdir(parents=True, exist_ok=True)
            ckpt.pretrained_checkpoint = str(target)
    answer["adjusted"] += _recipes._transformer_engine_off(cfg)
    try:
        with _recipes._stand_in_gpu(case["recipe"], answer["adjusted"]), \
                _recipes._stand_in_te_version(cfg, answer["adjusted"]):
            runtime_config_update(cfg)
    except Exception as exc:  # noqa: BLE001 - Bridge rejecting the config is the answer
        answer.update(stage="validate", **_raised(exc))
    else:
        answer.update(raises=False, stage="validate")
    if case.get("dump"):  # Bridge's own dump of the built config (as run_config.yaml), for seqpack's verdict
        target = scratch / "dumps" / f"{case.get('id', 'case')}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            cfg.to_yaml(str(target))
            answer["dump"] = target.read_text(encoding="utf-8")
        except Exception as exc:  # noqa: BLE001 - reported, the grader says why it has no verdict
            answer["dump_error"] = f"{type(exc).__name__}: {exc}"[:300]
    values = {}
    for dotted in case.get("read", []):
        try:
            owner, field = _resolve(cfg, dotted)
            values[dotted] = _plain(getattr(owner, field))
        except AttributeError:
            values[dotted] = None
    answer["values"] = values
    return answer


def op_recipe_overrides(cases: list[dict], scratch: str) -> list[dict]:
    """Per case (``id``, ``recipe`` = the function's qualified name, ``assignments`` = ``[[dotted, value], ...]``,
    optional ``world_size``, ``read`` = dotted fields to report, ``dump`` = also return Bridge's YAML dump of the
    config): whether the recipe built, whether Bridge's ``runtime_config_update`` raised (``stage``: ``override`` or
    ``validate``), the values read back and the dump."""
    for case in cases:  # import the recipe modules first: the stand-in cache covers the hub ids they pin
        try:
            importlib.import_module(case["recipe"].rpartition(".")[0])
        except Exception:  # noqa: BLE001 - reported by the case itself
            pass
    _standins.write_cache(_recipes._pinned_revisions())
    os.environ.setdefault("MEGATRON_CONFIG_LOCK_DIR", str(Path(os.environ["HF_HOME"]) / "locks"))
    environ = dict(os.environ)
    out = []
    for case in cases:
        try:
            answer = _one_recipe(case, Path(scratch))
        finally:
            os.environ.clear()
            os.environ.update(environ)
        out.append({"id": case.get("id"), **answer})
    return out


def op_source_files(paths: list[str]) -> dict:
    """The installed text of each path (``megatron/bridge/...`` or ``megatron/core/...``, relative to
    site-packages; None when the release has no such file) and the versions of both packages."""
    import megatron.bridge

    site = Path(megatron.bridge.__file__).resolve().parents[2]
    files = {}
    for rel in paths:
        target = (site / rel).resolve()
        inside = any(str(target).startswith(str(site / root) + os.sep) for root in _PACKAGES)
        files[rel] = target.read_text(encoding="utf-8") if inside and target.is_file() else None
    versions = {package: importlib.metadata.version(package) for package in _PACKAGES.values()}
    return {"files": files, "versions": versions}
