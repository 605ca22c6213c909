"""A fuzz pass over special files, symlinks, protected outputs, planted caches, roots inside files.

Every CLI command with a path argument gets every hostile path; every MCP tool with a path argument
gets every hostile path inside and outside its root. Each run is classified:
  crash        traceback / "internal error" / exit code not in {0,1,2}
  hang         no answer within the deadline
  data_loss    a sentinel (a file outside, a user file, a special file, a symlink's target) changed
  root_escape  (MCP) a canary from outside the root reached a result or a file in the root, or a write landed outside
  wrong        exit 0 / success where a refusal (or an integrity issue) is due; output differing from a clean run
  terminal     a character that drives a terminal (ESC, CR, a C1 control, a bidi override) printed raw
  clean        otherwise
Families of issue 34: files changed in place while a command reads them, exhaustion (descriptors, address
space, a row over the limit), bytes meant for the terminal in every path argument, and the HTTP server under
hostile clients (reused ids, foreign Host/Origin, a token in the query string, descriptor pressure).
Usage: python tests/faults/fuzz_files.py [SEQPACK_PYTHON] [--only FAMILY,...]  (prints a table; writes
fuzz-results.json in its temporary directory and prints that path). The families: cli, caches, swaps, mcp,
changing, exhaustion, terminal, http (all by default).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

_ARGS = [a for a in sys.argv[1:] if not a.startswith("--only")]
_ONLY = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), None)
if "--only" in sys.argv[1:-1]:
    _ONLY = sys.argv[sys.argv.index("--only") + 1]
    _ARGS.remove(_ONLY)
PY = _ARGS[0] if _ARGS else sys.executable
CANARY = "CANARYTOKEN"
DEADLINE = 90
W = Path(tempfile.mkdtemp(prefix="seqpack-fuzz-files-"))
RESULTS: list[dict] = []
RESULTS_LOST: dict[str, list] = {}


def digest_tree(paths):
    out = {}
    for base in paths:
        base = Path(base)
        items = [base] if not base.is_dir() or base.is_symlink() else sorted(base.rglob("*"))
        for p in items:
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and p.parent.name == ".seqpack-cache" and p.name.endswith(".idx.npz"):
                # seqpack's own line-index cache beside a JSONL file it read: written when it is first read and
                # rewritten once without its content hash when that read came within RACY_SECONDS of the file's
                # last change (data/jsonl.py); its presence is judged, not its bytes
                out[str(p)] = "seqpack line-index cache"
            elif stat.S_ISREG(st.st_mode):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                out[str(p)] = "link:" + os.readlink(p)
            else:
                out[str(p)] = f"mode:{stat.S_IFMT(st.st_mode)}"
    return out


# ------------------------------------------------------------------ fixtures
def rows(n, tag=""):
    return "".join(json.dumps({"prompt": f"q{i} {tag}", "completion": f"a{i} {tag}"}) + "\n" for i in range(n))


def png(path, text=None):
    from PIL import Image, PngImagePlugin
    info = PngImagePlugin.PngInfo()
    if text:
        info.add_text("c", text)
    Image.new("RGB", (28, 28), (200, 30, 30)).save(path, pnginfo=info)


outside = W / "outside"
outside.mkdir()
(outside / "canary.jsonl").write_text(rows(10, CANARY))
(outside / "canary.yaml").write_text(f"model:\n  seq_length: 1024\n# {CANARY}\n")
(outside / "canary.jinja").write_text("{% for m in messages %}" + CANARY + " {{ m['content'] }}\n{% endfor %}")
png(outside / "canary.png", CANARY)
(outside / "precious.json").write_text('{"keep": true}\n')
home = W / "home"
home.mkdir()
(home / "keep.txt").write_text("mine\n")

H = W / "hostile"
H.mkdir()


def special(name, kind, base=None):
    """A hostile file ``name`` of ``kind`` in ``base`` (default: the hostile-inputs folder)."""
    base = H if base is None else base
    p = base / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "chr":
        os.mknod(p, 0o600 | stat.S_IFCHR, os.stat("/dev/zero").st_rdev)
    elif kind == "null":
        os.mknod(p, 0o600 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
    elif kind == "sock":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        SOCKS.append(s)
    elif kind == "dir":
        p.mkdir()
    elif kind == "out-link":
        p.symlink_to(outside / "canary.jsonl")
    elif kind == "dangling":
        p.symlink_to(base / "nowhere")
    elif kind == "loop":
        p.symlink_to(p)
    return p


SOCKS = []
good = W / "data" / "good.jsonl"
good.parent.mkdir()
good.write_text(rows(40))
HOSTILE_INPUTS = {}
for ext in ("jsonl", "yaml", "json", "parquet"):
    for kind in ("fifo", "chr", "sock", "dir", "out-link", "dangling", "loop"):
        HOSTILE_INPUTS[(ext, kind)] = special(f"{kind}.{ext}", kind)
blend_fifo = H / "blend-fifo.yaml"
blend_fifo.write_text(f"[1.0, {HOSTILE_INPUTS[('jsonl', 'fifo')]}]\n")
HOSTILE_INPUTS[("yaml", "blend-with-fifo")] = blend_fifo
tokdir_fifo = H / "tok-fifo"
tokdir_fifo.mkdir()
os.mkfifo(tokdir_fifo / "tokenizer.json")
HOSTILE_INPUTS[("tok", "fifo-in-dir")] = tokdir_fifo
vlm_fifo = H / "vlm-fifo.jsonl"
os.mkfifo(H / "img-fifo.png")
vlm_fifo.write_text(json.dumps({"prompt": "<image> x", "completion": "y", "images": [str(H / "img-fifo.png")]}) + "\n")
HOSTILE_INPUTS[("jsonl", "vlm-image-fifo")] = vlm_fifo
vlm_dev = H / "vlm-dev.jsonl"
vlm_dev.write_text(json.dumps({"prompt": "<image> x", "completion": "y", "images": ["/dev/zero"]}) + "\n")
HOSTILE_INPUTS[("jsonl", "vlm-image-chardev")] = vlm_dev

outs = W / "outs"
outs.mkdir()
OUT_TARGETS = {
    "root": Path("/"), "home": home, "usr": Path("/usr"), "cwd": Path("."),
    "fifo": special("out-fifo", "fifo"), "chr": special("out-chr", "null"), "file": outs / "a-file.txt",
    "link-outside-dir": outs / "link-dir", "dangling": outs / "dangling",
}
(outs / "a-file.txt").write_text("keep me\n")
(outs / "link-dir").symlink_to(outside)
(outs / "dangling").symlink_to(outs / "nowhere")
META_TARGETS = {"fifo": special("meta-fifo.json", "fifo"), "chr": special("meta-chr.json", "null"),
                "link-outside": outs / "meta-link.json", "dir": outs}
(outs / "meta-link.json").symlink_to(outside / "precious.json")

SENTINELS = [outside, home, outs, H]


def release_fifos():
    for p in list(H.rglob("*")) + list(outs.rglob("*")):
        try:
            if stat.S_ISFIFO(os.lstat(p).st_mode):
                for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
                    try:
                        os.close(os.open(p, flags))
                    except OSError:
                        pass
        except OSError:
            pass


def top_entries():
    return set(os.listdir("/")) | {f"usr/{n}" for n in os.listdir("/usr")} | {f"etc/{n}" for n in os.listdir("/etc")}


# ------------------------------------------------------------------ CLI runs
def cli(case, family, args, *, expect, cwd=None, env=None, preexec=None):
    """expect: 'refuse' (exit 2), 'issue' (exit 1), 'ok' (exit 0), 'any' (0/1/2); ``preexec`` runs in the child
    before seqpack starts (resource limits)."""
    before = digest_tree(SENTINELS)
    tops = top_entries()
    env = {**os.environ, "HOME": str(home), **(env or {})}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([PY, "-m", "seqpack", *map(str, args)], capture_output=True, text=True,
                              timeout=DEADLINE, cwd=cwd or W, env=env, preexec_fn=preexec,
                              errors="backslashreplace")
        code, err, out = proc.returncode, proc.stderr, proc.stdout
    except subprocess.TimeoutExpired:
        release_fifos()
        code, err, out = "hang", "", ""
    took = time.monotonic() - t0
    after = digest_tree(SENTINELS)
    new_tops = top_entries() - tops
    for n in new_tops:  # a protected place was written: record, and undo what the fuzz caused
        target = Path("/") / n
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    cls = "clean"
    if code == "hang":
        cls = "hang"
    elif "Traceback" in err or "internal error" in err or code not in (0, 1, 2):
        cls = "crash"
    else:
        # data loss: something that was there is gone or changed (new files are writes, judged by `expect`),
        # or a protected place (/, /usr, /etc) received a new entry
        lost = [k for k in before if after.get(k) != before[k]]
        if lost or new_tops:
            cls = "data_loss"
            RESULTS_LOST[case] = lost[:5]
    if cls == "clean" and any(not ch.isprintable() and ch not in "\n\t" for ch in out + err):
        cls = "terminal"
    if cls == "clean":
        if expect == "refuse" and code != 2:
            cls = "wrong"
        elif expect == "issue" and code != 1:
            cls = "wrong"
        elif expect == "ok" and code != 0:
            cls = "wrong"
        if expect == "refuse" and code == 2:
            lines = [l for l in err.splitlines() if ": error: " in l]
            if len(lines) != 1:
                cls = "wrong"
    RESULTS.append({"face": "cli", "family": family, "case": case, "class": cls, "code": code, "s": round(took, 2),
                    "err": err.strip().splitlines()[-1][:240] if err.strip() else "", "new_tops": sorted(new_tops)})


def run_cli():
    fresh = outs / "fresh"
    readers = {
        "pack input": lambda p: ["pack", p, "--out", fresh / "p", "--pack-size", 256],
        "pack --validation": lambda p: ["pack", good, "--validation", p, "--out", fresh / "p", "--pack-size", 256],
        "pack --tokenizer": lambda p: ["pack", good, "--tokenizer", p, "--out", fresh / "p", "--pack-size", 256],
        "plan --jsonl": lambda p: ["plan", "--jsonl", p],
        "plan --tokenizer": lambda p: ["plan", "--jsonl", good, "--tokenizer", p],
        "batches input": lambda p: ["batches", p],
        "batches --tokenizer": lambda p: ["batches", good, "--tokenizer", p],
        "batches global input": lambda p: ["batches", p, "--mode", "global-batch"],
        "energon-prepare input": lambda p: ["energon-prepare", p, "--out", fresh / "e"],
        "validate config": lambda p: ["validate", p],
        "smoke --config": lambda p: ["smoke", "--path", "offline", "--config", p],
        "smoke --data": lambda p: ["smoke", "--path", "offline", "--data", p],
        "inspect path": lambda p: ["inspect", p],
        "eval score run_dir": lambda p: ["eval", "score", p],
        "eval list --tasks-file": lambda p: ["eval", "list", "--tasks-file", p],
        "eval report run_dir": lambda p: ["eval", "report", p, "--out", fresh / "r.md"],
        "mcp --root": lambda p: ["mcp", "--root", p, "--lifetime", "1"],
    }
    for name, make in readers.items():
        for (ext, kind), path in HOSTILE_INPUTS.items():
            if kind == "dir" and name in ("inspect path", "eval score run_dir", "eval report run_dir", "mcp --root"):
                continue  # a directory is what these take
            if kind == "out-link":
                expect = "any"  # the CLI has no roots: reading a symlinked file is allowed
            else:
                expect = "refuse"
            if ext == "tok" and "tokenizer" not in name:
                continue
            cli(f"{name} <- {kind}.{ext}", "special files/symlinks", make(path), expect=expect)
        shutil.rmtree(fresh, ignore_errors=True)
    writers = {
        "pack --out": lambda t: ["pack", good, "--out", t, "--pack-size", 256],
        "energon-prepare --out": lambda t: ["energon-prepare", good, "--out", t],
        "energon-prepare --out --overwrite": lambda t: ["energon-prepare", good, "--out", t, "--overwrite"],
        "install-skill --project": lambda t: ["install-skill", "--client", "claude", "--project", t],
        "install-skill --project --force": lambda t: ["install-skill", "--client", "codex", "--project", t, "--force"],
        "eval report --out": lambda t: ["eval", "report", W / "run", "--out", t],
        "eval export --out": lambda t: ["eval", "export", "--out", t],
    }
    for name, make in writers.items():
        for kind, target in OUT_TARGETS.items():
            expect = "refuse"
            if kind == "link-outside-dir" and name.startswith(("pack", "install")):
                expect = "any"  # writing inside a symlinked directory is allowed without roots
            if name.startswith("eval export") and kind == "link-outside-dir":
                expect = "any"
            # The documented uses: new outputs inside the current directory (pack and eval export create their
            # own files beside what is there; install-skill's default project is "."), and the skill installed
            # for the user under the home directory (what --user does). Nothing that was there may change:
            # the data-loss check above still judges these cases.
            if kind == "cwd" and name.startswith(("pack", "install", "eval export")):
                expect = "any"
            if kind == "home" and name.startswith("install"):
                expect = "any"
            cli(f"{name} -> {kind}", "output safety", make(target), expect=expect, cwd=outs)
    for kind, target in META_TARGETS.items():
        cli(f"pack --metadata-path -> {kind}", "special files/symlinks",
            ["pack", good, "--out", outs / "fresh" / "m", "--pack-size", 256, "--metadata-path", target], expect="refuse")
    shutil.rmtree(outs / "fresh", ignore_errors=True)


# ------------------------------------------------------------------ caches and artifacts
def run_caches():
    import numpy as np

    base = W / "caches"
    base.mkdir()
    # planted index: row 0 three times
    d = base / "planted.jsonl"
    d.write_text(rows(40))
    subprocess.run([PY, "-c", f"from seqpack.data.jsonl import JsonlFile; JsonlFile({str(d)!r})"], check=True)
    cache = base / ".seqpack-cache" / "planted.jsonl.idx.npz"
    with np.load(cache) as z:
        arrays = {k: z[k] for k in z.files}
    for k in ("starts", "ends", "lines"):
        arrays[k][1:3] = arrays[k][0]
    with open(cache, "wb") as fh:
        np.savez(fh, **arrays)
    cli("pack <- planted index", "planted caches", ["pack", d, "--out", base / "o1", "--pack-size", 256, "--json"],
        expect="ok")
    res = json.loads(subprocess.run([PY, "-m", "seqpack", "pack", d, "--out", base / "o1", "--pack-size", "256",
                                     "--json"], capture_output=True, text=True).stdout or "{}")
    packed = res.get("splits", {}).get("training", {}).get("accounting", {}).get("packed")
    if packed != 40:
        RESULTS[-1]["class"] = "wrong"
    # stale index: same-size edit in the middle, mtime restored
    s = base / "stale.jsonl"
    s.write_text("".join(json.dumps({"prompt": f"q{i} " + "x" * 200, "completion": f"a{i}"}) + "\n" for i in range(80)))
    subprocess.run([PY, "-c", f"from seqpack.data.jsonl import JsonlFile; JsonlFile({str(s)!r})"], check=True)
    lines = s.read_text().splitlines(keepends=True)
    lines[40] = "{" + "!" * (len(lines[40]) - 2) + "\n"
    st = s.stat()
    s.write_text("".join(lines))
    os.utime(s, ns=(st.st_atime_ns, st.st_mtime_ns))
    cli("pack <- stale index (edited)", "planted caches", ["pack", s, "--out", base / "o2", "--pack-size", 512],
        expect="refuse")
    for tool in ("plan", "batches"):
        args = ["plan", "--jsonl", s] if tool == "plan" else ["batches", s, "--num-batches", "100"]
        cli(f"{tool} <- stale index (edited)", "planted caches", args, expect="refuse")
    # FIFO as cache
    f = base / "fifocache.jsonl"
    f.write_text(rows(20))
    os.mkfifo(base / ".seqpack-cache" / "fifocache.jsonl.idx.npz")
    cli("pack <- FIFO as index cache", "planted caches", ["pack", f, "--out", base / "o3", "--pack-size", 256], expect="ok")
    # manifest accounting edited
    m = base / "acct.jsonl"
    m.write_text(rows(40))
    subprocess.run([PY, "-m", "seqpack", "pack", m, "--out", base / "o4", "--pack-size", "256"], capture_output=True)
    man = next((base / "o4").rglob("seqpack_manifest.json"))
    doc = json.loads(man.read_text())
    acc = doc["splits"]["training"]["accounting"]
    acc.update(packed=acc["packed"] - 5, skipped_total=5, skipped={"empty_completion": {"count": 5, "examples": []}})
    man.write_text(json.dumps(doc))
    before = len(RESULTS)
    cli("pack reuse <- edited accounting", "planted caches", ["pack", m, "--out", base / "o4", "--pack-size", 256],
        expect="ok")
    out = subprocess.run([PY, "-m", "seqpack", "pack", m, "--out", base / "o4", "--pack-size", "256"],
                         capture_output=True, text=True).stdout
    # the run above already rebuilt it; check the rebuilt manifest is right
    if json.loads(man.read_text())["splits"]["training"]["accounting"]["packed"] != 40:
        RESULTS[before]["class"] = "wrong"
    # metadata understating, consistent records
    meta = next((base / "o4").rglob("*_metadata.jsonl"))
    entries = json.loads(meta.read_text())
    entries[0].update(max_samples_per_bin=1, dataset_max_seqlen=1)
    meta.write_text(json.dumps(entries))
    doc = json.loads(man.read_text())
    data = meta.read_bytes()
    doc["files"][meta.name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    man.write_text(json.dumps(doc))
    cli("inspect <- understated metadata", "planted caches", ["inspect", man.parent], expect="issue")
    # energon: missing shard, missing index, stray shard
    e = base / "ds"
    subprocess.run([PY, "-m", "seqpack", "energon-prepare", m, "--out", e, "--shard-size", "10"],
                   capture_output=True, check=True)
    for damage in ("missing shard", "missing index", "stray shard"):
        c = base / f"ds-{damage.replace(' ', '-')}"
        shutil.copytree(e, c)
        if damage == "missing shard":
            (c / "shards" / "train-00001.tar").unlink()
        elif damage == "missing index":
            (c / ".nv-meta" / "split.yaml").unlink()
        else:
            shutil.copy(c / "shards" / "train-00000.tar", c / "shards" / "train-00007.tar")
        cli(f"inspect energon <- {damage}", "planted caches", ["inspect", c], expect="issue")
    # the same file as two splits
    cli("pack <- same file train+validation", "planted caches",
        ["pack", m, "--validation", m, "--out", base / "o5", "--pack-size", 256], expect="refuse")
    # a user dir inside a pack / energon dataset / .nv-meta file
    pack_dir = man.parent
    (pack_dir / "mine").mkdir()
    cli("pack --overwrite <- user dir inside", "output safety",
        ["pack", m, "--out", base / "o4", "--pack-size", 256, "--overwrite"], expect="refuse")
    if not (pack_dir / "mine").is_dir():
        RESULTS[-1]["class"] = "data_loss"
    (e / ".nv-meta" / "notes.txt").write_text("mine")
    cli("energon --overwrite <- user file in .nv-meta", "output safety",
        ["energon-prepare", m, "--out", e, "--overwrite"], expect="refuse")
    if not (e / ".nv-meta" / "notes.txt").is_file():
        RESULTS[-1]["class"] = "data_loss"


# ------------------------------------------------------------------ kill -9 during swaps
def run_swaps():
    base = W / "swaps"
    base.mkdir()
    src = base / "a.jsonl"
    src.write_text(rows(30))
    small = base / "b.jsonl"
    small.write_text(rows(8, "b"))
    code = ("import os, signal, sys\nfrom seqpack.io import atomic\nstep = sys.argv[1]\n"
            "atomic._step = lambda name: os.kill(os.getpid(), signal.SIGKILL) if name == step else None\n"
            "from seqpack.faces.cli import main\nsys.exit(main(sys.argv[2:]))\n")
    for step in ("start", "aside", "in", "done"):
        for follow in ("energon-prepare", "energon-prepare --overwrite"):
            out = base / f"ds-{step}-{follow.count('-')}"
            subprocess.run([PY, "-m", "seqpack", "energon-prepare", src, "--out", out], capture_output=True,
                           check=True)
            subprocess.run([PY, "-c", code, step, "energon-prepare", small, "--out", out, "--overwrite"],
                           capture_output=True, timeout=DEADLINE)
            args = ["energon-prepare", small, "--out", out] + (["--overwrite"] if "overwrite" in follow else [])
            proc = subprocess.run([PY, "-m", "seqpack", *map(str, args)], capture_output=True, text=True,
                                  timeout=DEADLINE)
            ok = subprocess.run([PY, "-c", "import sys; from seqpack.packing.energon.prepare import read_manifest;"
                                 "print(read_manifest(sys.argv[1]).samples)", out], capture_output=True, text=True)
            cls = "clean" if ok.returncode == 0 else "data_loss"
            if "Traceback" in proc.stderr:
                cls = "crash"
            RESULTS.append({"face": "cli", "family": "output safety", "case": f"kill -9 at {step}, then {follow}",
                            "class": cls, "code": proc.returncode, "err": proc.stderr.strip()[-200:],
                            "after": ok.stdout.strip()})


# ------------------------------------------------------------------ MCP
async def mcp_call(root, tool, args):
    from mcp import Client
    from seqpack.faces.mcp.server import build_server

    async with Client(build_server([root])) as client:
        with_timeout = asyncio.wait_for(client.call_tool(tool, args), DEADLINE)
        result = await with_timeout
    return result.is_error, "".join(getattr(c, "text", "") for c in result.content)


def mcp(case, family, root, tool, args, *, expect):
    before = digest_tree([outside, home])
    try:
        error, text = asyncio.run(mcp_call(root, tool, args))
        status = "error" if error else "ok"
    except (asyncio.TimeoutError, TimeoutError):
        release_fifos()
        status, text = "hang", ""
    except Exception as exc:  # noqa: BLE001
        status, text = "crash", f"{type(exc).__name__}: {exc}"
    after = digest_tree([outside, home])
    canary_in = CANARY in text
    for p in root.rglob("*"):
        try:
            if stat.S_ISREG(os.lstat(p).st_mode) and p.stat().st_size < 50 << 20 and CANARY.encode() in p.read_bytes():
                canary_in = True
        except OSError:
            pass
    cls = "clean"
    if status == "hang":
        cls = "hang"
    elif status == "crash" or "internal error" in text.lower() or "Traceback" in text:
        cls = "crash"
    elif before != after:
        cls = "root_escape"
    elif canary_in:
        cls = "root_escape"
    elif expect == "refuse" and status != "error":
        cls = "wrong"
    elif expect == "ok" and status != "ok":
        cls = "wrong"
    RESULTS.append({"face": "mcp", "family": family, "case": case, "class": cls, "status": status,
                    "text": text.strip().splitlines()[0][:240] if text.strip() else ""})


def run_mcp():
    root = W / "mcproot"
    root.mkdir()
    (root / "good.jsonl").write_text(rows(30))
    png(root / "mine.png")
    env_cache = W / "user-cache"
    os.environ["SEQPACK_CACHE_DIR"] = str(env_cache)
    inside = {}
    for kind in ("fifo", "chr", "sock", "dir", "out-link", "dangling", "loop"):
        p = special(f"h-{kind}.jsonl", kind, root)
        inside[kind] = p.name
    inside["dotdot"] = "../outside/canary.jsonl"
    inside["absolute-outside"] = str(outside / "canary.jsonl")
    (root / "blend-out.yaml").write_text(f"[1.0, {outside / 'canary.jsonl'}]\n")
    inside["blend->outside"] = "blend-out.yaml"
    (root / "blend-fifo.yaml").write_text(f"[1.0, {root / 'h-fifo.jsonl'}]\n")
    inside["blend->fifo"] = "blend-fifo.yaml"
    for name, ref in (("img-abs", str(outside / "canary.png")), ("img-dotdot", "../outside/canary.png"),
                      ("img-fifo", "h-fifo.jsonl"), ("img-dev", "/dev/zero"), ("img-link", "img-link.png")):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"prompt": f"<image> q{i}", "completion": "red",
                                                                "images": [ref]}) + "\n" for i in range(4)))
        inside[f"rows:{name}"] = f"{name}.jsonl"
    (root / "img-link.png").symlink_to(outside / "canary.png")
    # .seqpack-cache symlink out, and a planted cache
    (root / "c").mkdir()
    (root / "c" / "d.jsonl").write_text(rows(20))
    (outside / "cachedir").mkdir()
    (root / "c" / ".seqpack-cache").symlink_to(outside / "cachedir")
    inside["cache-symlink-out"] = "c/d.jsonl"
    # tokenizer dirs
    import tokenizers
    for tname, extra in (("tok-link", "link"), ("tok-fifo-cfg", "fifo-cfg"), ("tok-ok", None)):
        td = root / tname
        td.mkdir()
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        tok.train_from_iterator(["q a 0 1 2 3 4 5 6 7 8 9 user assistant hi yo"],
                                tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>"]))
        tok.save(str(td / "tokenizer.json"))
        if extra == "fifo-cfg":
            os.mkfifo(td / "tokenizer_config.json")
        else:
            (td / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
        if extra == "link":
            (td / "chat_template.jinja").symlink_to(outside / "canary.jinja")
    (root / "chat.jsonl").write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"hi {i}"},
                                                                      {"role": "assistant", "content": f"yo {i}"}]}) + "\n"
                                             for i in range(6)))
    (root / "cfg-link.yaml").symlink_to(outside / "canary.yaml")
    ok_kinds = {"dotdot": "refuse", "absolute-outside": "refuse"}
    tools = {
        "validate_config.path": lambda p: ("validate_config", {"path": p}),
        "plan_pack_length.jsonl_path": lambda p: ("plan_pack_length", {"jsonl_path": p}),
        "pack_dataset.input_path": lambda p: ("pack_dataset", {"input_path": p, "output_dir": "o", "pack_size": 256}),
        "pack_dataset.validation_path": lambda p: ("pack_dataset", {"input_path": "good.jsonl", "validation_path": p,
                                                                    "output_dir": "o", "pack_size": 256}),
        "inspect_packed_dataset.path": lambda p: ("inspect_packed_dataset", {"path": p}),
        "inspect_in_batch.input_path": lambda p: ("inspect_in_batch", {"input_path": p, "mbs": 2}),
        "inspect_global_batch.input_path": lambda p: ("inspect_global_batch", {"input_path": p}),
        "prepare_energon_dataset.input_path": lambda p: ("prepare_energon_dataset", {"input_path": p, "output_dir": "e"}),
        "run_packing_smoke_test.data_path": lambda p: ("run_packing_smoke_test", {"data_path": p, "path": "offline",
                                                                                  "cp_check": False}),
    }
    for tname, make in tools.items():
        for kind, ref in inside.items():
            if kind == "dir" and tname == "inspect_packed_dataset.path":
                continue
            if kind.startswith("rows:") and not tname.startswith(("inspect_in_batch", "prepare_energon",
                                                                  "plan_pack_length", "pack_dataset.input")):
                continue
            if kind == "cache-symlink-out":
                expect = "any"
            else:
                expect = "refuse"
            tool, args = make(ref)
            mcp(f"{tname} <- {kind}", "roots/special files", root, tool, args, expect=expect)
            for leftover in ("o", "e"):
                p = root / leftover
                if p.exists() and not p.is_symlink():
                    shutil.rmtree(p)
    mcp("validate_config.path <- symlink outside", "roots", root, "validate_config", {"path": "cfg-link.yaml"},
        expect="refuse")
    mcp("pack_dataset.tokenizer <- chat_template.jinja symlink outside", "roots", root, "pack_dataset",
        {"input_path": "chat.jsonl", "output_dir": "o", "pack_size": 64, "tokenizer_path": "tok-link/tokenizer.json"},
        expect="refuse")
    mcp("pack_dataset.tokenizer <- FIFO tokenizer_config.json", "roots/special files", root, "pack_dataset",
        {"input_path": "chat.jsonl", "output_dir": "o", "pack_size": 64, "tokenizer_path": "tok-fifo-cfg/tokenizer.json"},
        expect="refuse")
    mcp("pack_dataset.tokenizer <- ok (control)", "roots", root, "pack_dataset",
        {"input_path": "good.jsonl", "output_dir": "o", "pack_size": 64, "tokenizer_path": "tok-ok/tokenizer.json"},
        expect="ok")
    shutil.rmtree(root / "o", ignore_errors=True)
    (root / "outlink").symlink_to(outside)
    os.mkfifo(root / "meta.fifo")
    (root / "meta-link.json").symlink_to(outside / "precious.json")
    for kind, args in (("output_dir symlink outside", {"output_dir": "outlink"}), ("output_dir ..", {"output_dir": ".."}),
                       ("metadata_path FIFO", {"output_dir": "o", "metadata_path": "meta.fifo"}),
                       ("metadata_path symlink outside", {"output_dir": "o", "metadata_path": "meta-link.json"}),
                       ("metadata_path ../outside", {"output_dir": "o", "metadata_path": "../outside/new.json"})):
        mcp(f"pack_dataset <- {kind}", "roots/output safety", root, "pack_dataset",
            {"input_path": "good.jsonl", "pack_size": 256, **args}, expect="refuse")
    for kind, out in (("symlink outside", "outlink"), ("..", "..")):
        mcp(f"prepare_energon_dataset.output_dir <- {kind}", "roots/output safety", root, "prepare_energon_dataset",
            {"input_path": "good.jsonl", "output_dir": out}, expect="refuse")
    if env_cache.exists():
        RESULTS.append({"face": "mcp", "family": "roots", "case": "user cache outside the root written",
                        "class": "root_escape"})


# ------------------------------------------------------------------ issue 34: files that change under a command
def _changer(path, how, delay, done):
    """In a thread: after ``delay`` s change ``path`` the way ``how`` says (unless the command is already done)."""
    def run():
        time.sleep(delay)
        if done.is_set() or not path.exists():
            return
        size = path.stat().st_size
        if how == "shrink":
            os.truncate(path, size // 7)
        elif how == "empty":
            os.truncate(path, 0)
        elif how == "rewrite":
            text = rows(size // 30 + 10, "zz").encode()[:size]
            with open(path, "r+b") as fh:
                fh.write(text.ljust(size, b" "))
        elif how == "grow":
            with open(path, "ab") as fh:
                fh.write(rows(50, "late").encode())
        elif how == "regrow":
            os.truncate(path, 0)
            path.write_text(rows(5000, "new"))
        elif how == "rename":
            fresh = path.with_name(path.name + ".new")
            fresh.write_text(rows(3, "renamed"))
            os.replace(fresh, path)
    import threading
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def run_changing():
    import random
    import threading

    rng = random.Random(34)
    base = W / "changing"
    base.mkdir()
    commands = {
        "pack": lambda d, o: ["pack", d, "--out", o, "--pack-size", 4096, "--no-progress"],
        "pack --workers 2": lambda d, o: ["pack", d, "--out", o, "--pack-size", 4096, "--no-progress", "--workers", 2],
        "plan": lambda d, o: ["plan", "--jsonl", d],
        "batches": lambda d, o: ["batches", d, "--num-batches", 1000],
        "batches global": lambda d, o: ["batches", d, "--mode", "global-batch", "--gbs", 4, "--num-batches", 1000],
        "energon-prepare": lambda d, o: ["energon-prepare", d, "--out", o],
    }
    for k, (name, make) in enumerate(sorted(commands.items()) * 4):
        how = rng.choice(["shrink", "empty", "rewrite", "grow", "regrow", "rename"])
        data = base / f"d{k}.jsonl"
        data.write_text(rows(rng.choice([3000, 20000, 60000]), "x" * rng.randrange(0, 200)))
        done = threading.Event()
        _changer(data, how, rng.uniform(0.3, 3.0), done)
        # any exit but a crash: a change before the read ends is one line, a change after it is no change at all
        cli(f"{name} <- {how} while reading", "files that change", make(data, base / f"o{k}"), expect="any")
        done.set()


# ------------------------------------------------------------------ issue 34: exhaustion
def run_exhaustion():
    import random
    import resource

    rng = random.Random(3434)
    base = W / "exhaustion"
    base.mkdir()
    big = base / "bigrow.jsonl"
    with open(big, "wb") as fh:  # one row over MAX_ROW_BYTES (32 MiB) between two small ones
        fh.write(rows(1).encode())
        fh.write(b'{"prompt": "' + b"x" * ((32 << 20) + 10) + b'", "completion": "a"}\n')
        fh.write(rows(1, "b").encode())
    commands = {
        "pack": lambda d: ["pack", d, "--out", base / "o", "--pack-size", 256, "--no-progress"],
        "plan": lambda d: ["plan", "--jsonl", d],
        "batches": lambda d: ["batches", d],
        "energon-prepare": lambda d: ["energon-prepare", d, "--out", base / "e", "--overwrite"],
        "inspect": lambda d: ["inspect", base / "o"],
        "validate": lambda d: ["validate", outside / "canary.yaml"],
    }
    for name, make in sorted(commands.items()):
        if name not in ("inspect", "validate"):
            cli(f"{name} <- a row over the limit", "exhaustion", make(big), expect="refuse")
    for k in range(24):
        name = rng.choice(sorted(commands))
        nofile = rng.choice([None, 7, 9, 12, 16, 24])
        memory = rng.choice([None, 300 << 20, 600 << 20, 1 << 30])

        def limits(nofile=nofile, memory=memory):
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if memory:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

        cli(f"{name} <- nofile {nofile}, address space {memory}", "exhaustion", make(good), expect="any",
            preexec=limits)


# ------------------------------------------------------------------ issue 34: bytes meant for the terminal
DRIVING = ["\x1b[2J", "\x1b]0;t\x07", "\r", "\x08", "\x07", "\x7f", "\x9b31m", "\u202e", "\u2066", "\u200b", "\u2028"]


def run_terminal():
    base = W / "terminal"
    base.mkdir()
    for k, bad in enumerate(DRIVING):
        missing = base / f"in{bad}.jsonl"
        args = {
            "pack input": ["pack", missing, "--out", base / "o", "--pack-size", 256],
            "pack --out": ["pack", good, "--out", base / f"out{bad}", "--pack-size", 256, "--no-progress"],
            "pack --prompt-column": ["pack", good, "--prompt-column", f"c{bad}", "--out", base / "o", "--pack-size",
                                     256],
            "plan --jsonl": ["plan", "--jsonl", missing],
            "batches input": ["batches", missing],
            "energon-prepare input": ["energon-prepare", missing, "--out", base / "e"],
            "validate config": ["validate", base / f"c{bad}.yaml"],
            "inspect path": ["inspect", base / f"p{bad}"],
            "smoke --data": ["smoke", "--path", "offline", "--data", missing],
            "unknown flag": ["plan", "--jsonl", good, f"--x{bad}"],
        }
        img = base / f"img{k}.jsonl"
        img.write_text(json.dumps({"prompt": "<image> q", "completion": "a", "images": [f"i{bad}.png"]}) + "\n")
        args["image path in a row"] = ["plan", "--jsonl", img, "--vision", "qwen2_vl"]
        blend = base / f"blend{k}.json"
        blend.write_text(json.dumps([1.0, f"s{bad}.jsonl"]))
        args["blend source"] = ["pack", blend, "--out", base / "o", "--pack-size", 256]
        for name, a in args.items():
            expect = "ok" if name == "pack --out" else "refuse"
            cli(f"{name} <- {bad!r}", "terminal bytes", a, expect=expect)


# ------------------------------------------------------------------ issue 34: the HTTP server under hostile clients
def _post(port, message, headers=None, path="/mcp", timeout=60):
    import urllib.error
    import urllib.request

    head = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25", **(headers or {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(message).encode(), headers=head)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def run_http():
    import random
    import threading

    from seqpack.training.ranks import reserved_port

    rng = random.Random(3400)
    base = W / "http"
    base.mkdir()
    secret = "fuzz-secret-token-0123456789"
    (base / "token").write_text(secret + "\n")
    os.chmod(base / "token", 0o600)
    log = base / "server.log"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "f", "version": "1"}}}
    auth = {"Authorization": f"Bearer {secret}"}
    with reserved_port() as port, log.open("w") as err:
        proc = subprocess.Popen([PY, "-m", "seqpack", "mcp", "--transport", "http", "--port", str(port), "--root",
                                 str(base), "--lifetime", "600", "--token-file", str(base / "token")],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=base)
        try:
            for _ in range(300):
                if "listening on" in log.read_text():
                    break
                time.sleep(0.1)
            time.sleep(0.5)
            status, headers, _ = _post(port, init, auth)
            session = {k.lower(): v for k, v in headers.items()}.get("mcp-session-id", "")
            _post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {**auth, "mcp-session-id": session})
            for k in range(12):  # concurrent calls, ids drawn from a small set: every call answered
                ids = [rng.choice([7, 8, "a"]) for _ in range(rng.randint(2, 5))]
                answers = [None] * len(ids)

                def one(j, ident=None, ids=ids, answers=answers):
                    call = {"jsonrpc": "2.0", "id": ids[j], "method": "tools/call", "params": {
                        "name": "plan_pack_length", "arguments": {"mix": "long_tail", "n": 300_000,
                                                                  "candidates": [4096]}}}
                    try:
                        answers[j] = _post(port, call, {**auth, "mcp-session-id": session}, timeout=90)[0]
                    except OSError:
                        answers[j] = "none"

                threads = [threading.Thread(target=one, args=(j,)) for j in range(len(ids))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
                cls = "hang" if "none" in answers or None in answers else "clean"
                if cls == "clean" and not all(a in (200, 400) for a in answers):
                    cls = "wrong"
                RESULTS.append({"face": "mcp", "family": "http server", "case": f"ids {ids}", "class": cls,
                                "status": answers})
            for k in range(20):  # Host and Origin headers
                host = rng.choice(["127.0.0.1", "localhost", "evil.example", "127.0.0.2"]) + rng.choice(
                    ["", f":{port}", f":{port + 1}", ":80"])
                origin = rng.choice([None, f"http://127.0.0.1:{port}", f"http://localhost:{port + 1}", "null"])
                headers = {**auth, "Host": host, **({"Origin": origin} if origin else {})}
                status = _post(port, init, headers)[0]
                ok_hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
                want = host in ok_hosts and (origin is None or origin in {f"http://{h}" for h in ok_hosts})
                RESULTS.append({"face": "mcp", "family": "http server", "case": f"Host {host}, Origin {origin}",
                                "class": "clean" if (status == 200) == want else "wrong", "status": status})
            for k in range(8):  # the token in the query string: refused, never logged
                query = rng.choice([f"token={secret}", f"x=1&token={secret}", f"access_token={secret}&a=b"])
                status = _post(port, init, path=f"/mcp?{query}")[0]
                time.sleep(0.2)
                leaked = secret in log.read_text()
                RESULTS.append({"face": "mcp", "family": "http server", "case": f"?{query.replace(secret, 'SECRET')}",
                                "class": "root_escape" if leaked else ("clean" if status == 401 else "wrong"),
                                "status": status})
            held = []  # descriptor pressure: a burst of idle connections, then a real call
            before = len(log.read_text())
            for _ in range(rng.randint(50, 400)):
                try:
                    held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
                except OSError:
                    break
            time.sleep(2)
            for c in held:
                c.close()
            grown = len(log.read_text()) - before
            status = _post(port, init, auth)[0]
            RESULTS.append({"face": "mcp", "family": "http server", "case": f"{len(held)} idle connections",
                            "class": "clean" if status == 200 and grown < 200_000 and "Traceback" not in
                            log.read_text() else "crash", "status": status})
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def main():
    # a scored run for eval report
    repo = Path(__file__).resolve().parent
    families = {"cli": run_cli, "caches": run_caches, "swaps": run_swaps, "mcp": run_mcp, "changing": run_changing,
                "exhaustion": run_exhaustion, "terminal": run_terminal, "http": run_http}
    chosen = _ONLY.split(",") if _ONLY else list(families)
    unknown = sorted(set(chosen) - set(families))
    if unknown:
        sys.exit(f"unknown families {unknown}; choose from {sorted(families)}")
    for name in chosen:
        families[name]()
    counts = defaultdict(Counter)
    for r in RESULTS:
        counts[(r["face"], r["family"])][r["class"]] += 1
    classes = ["clean", "crash", "hang", "data_loss", "root_escape", "wrong", "terminal"]
    print(f"{'face':5s} {'family':28s} " + " ".join(f"{c:>11s}" for c in classes) + "  total")
    total = Counter()
    for key in sorted(counts):
        c = counts[key]
        total.update(c)
        print(f"{key[0]:5s} {key[1]:28s} " + " ".join(f"{c[x]:11d}" for x in classes) + f"  {sum(c.values())}")
    print(f"{'all':34s} " + " ".join(f"{total[x]:11d}" for x in classes) + f"  {sum(total.values())}")
    (W / "fuzz-results.json").write_text(json.dumps({"results": RESULTS, "lost": RESULTS_LOST}, indent=1))
    print(f"results: {W / 'fuzz-results.json'}")
    for r in RESULTS:
        if r["class"] != "clean":
            print("NOT CLEAN:", r)


if __name__ == "__main__":
    main()
    print(W)
