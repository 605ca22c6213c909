"""Every size limit of the public verbs, in one place.

The library enforces these (so the CLI, the MCP server and a Python caller refuse the same
inputs with the same error); the MCP server also publishes them in its input schemas. A limit
protects the machine (memory, time) or the reader (output size); it never changes a result that
stays within it. Raise or lower one here and every face follows.
"""

from __future__ import annotations

# -- topology ------------------------------------------------------------------------------------
#: Largest TP / CP / evaluation-CP size accepted.
MAX_PARALLEL_SIZE = 4096
#: Largest data-parallel size accepted.
MAX_DATA_PARALLEL_SIZE = 1 << 20
#: Largest explicit ``pad_seq_to_mult``.
MAX_PAD_SEQ_TO_MULT = 65536

# -- lengths and packs ---------------------------------------------------------------------------
#: Largest pack length / pack capacity / sequence length, in tokens (4M).
MAX_PACK_LEN = 1 << 22
#: Most sample lengths passed inline (a list in a call, not a file).
MAX_INLINE_LENGTHS = 1_000_000
#: Most samples a plan expands into memory (a histogram's counts, a synthetic mix's n); about 120
#: bytes each while the candidates are simulated, so the ceiling costs about 1.2 GB.
MAX_PLAN_SAMPLES = 10_000_000
#: Longest single sample a length list or histogram may name, in tokens (beyond any pack; int64-safe).
MAX_SAMPLE_TOKENS = 1 << 40
#: Most candidate pack lengths compared in one plan.
MAX_CANDIDATES = 16
#: Largest token-slot count per optimizer step.
MAX_TOKEN_SLOTS = 1 << 40
#: Largest ``max_seqs_per_pack``.
MAX_SEQS_PER_PACK = 1 << 20
#: Largest sample drawn by a synthetic length mix.
MAX_MIX_LENGTH = MAX_PACK_LEN
#: Most samples drawn from a blend (the draw order costs 16 bytes a sample: 1.6 GB at the ceiling).
MAX_BLEND_SAMPLES = 100_000_000
#: Most passes over one source a blend may draw (a few rows drawn a billion times is a mistake).
MAX_BLEND_EPOCHS = 1000
#: Most tokenizer worker processes.
MAX_WORKERS = 256
#: Fewest rows per shard of ``--bin-scope shard`` (smaller shards pack worse; a job has 1,024 rows).
MIN_SHARD_ROWS = 1024
#: Most rows per shard (one shard's lengths are packed in one process).
MAX_SHARD_ROWS = MAX_BLEND_SAMPLES
#: Most packs per Parquet row group of offline packs (a writer holds one row group in memory).
MAX_ROW_GROUP_SIZE = 100_000

#: Largest seed (NumPy and torch take it as a signed 64-bit integer).
MAX_SEED = (1 << 63) - 1
#: Largest token id accepted as an argument (EOS id); vocabularies are far smaller.
MAX_TOKEN_ID = (1 << 31) - 1

# -- output sizes --------------------------------------------------------------------------------
#: Most bins a packing simulation returns in one page.
MAX_BINS_RETURNED = 1000
#: Most item indices a packing simulation returns in one page (over all bins).
MAX_ITEMS_RETURNED = 20_000
#: Most oversize / truncated item indices a packing simulation lists.
MAX_INDICES_RETURNED = 1000
#: Most rules a keyword query returns (default and ceiling).
DEFAULT_RULES_RETURNED = 10
MAX_RULES_RETURNED = 50
#: Most micro-batches ``batches`` (in-batch) shows, and most steps (global-batch).
MAX_BATCHES_SHOWN = 1000
MAX_STEPS_SHOWN = 1000
#: Largest global batch size ``batches --mode global-batch`` simulates.
MAX_GLOBAL_BATCH_SIZE = 1 << 20

# -- inputs --------------------------------------------------------------------------------------
#: Longest config text accepted inline (YAML/JSON).
MAX_CONFIG_CHARS = 200_000
#: Most dotted overrides in one call, and the longest one.
MAX_OVERRIDES = 200
MAX_OVERRIDE_CHARS = 1000
#: Longest file path argument.
MAX_PATH_CHARS = 4096
#: Longest free-text query (rule keywords, model family).
MAX_QUERY_CHARS = 200

# -- tokenizer directories -------------------------------------------------------------------------
#: Largest ``tokenizer.json`` read (real ones are 2-40 MB), and largest ``tokenizer_config.json``
#: or ``chat_template.jinja`` (real ones are a few KB to about 1 MB).
MAX_TOKENIZER_FILE_BYTES = 1 << 29
MAX_TOKENIZER_CONFIG_BYTES = 1 << 25

# -- chat templates (seqpack.data.template_bounds) --------------------------------------
#: Longest chat template source read, in characters (real ones are a few KB to tens of KB).
MAX_TEMPLATE_SOURCE_CHARS = 1_000_000
#: Most loop iterations, calls and filter applications of one render (a long real chat takes a
#: few thousand), and the longest one render may take, in seconds.
MAX_TEMPLATE_STEPS = 2_000_000
MAX_TEMPLATE_SECONDS = 5.0
#: Longest string one render may build or write, in characters (8 per token of the largest pack),
#: and the most items of a list it may build.
MAX_TEMPLATE_CHARS = 1 << 25
MAX_TEMPLATE_ITEMS = 1 << 17
#: The rendered text of a conversation may be at most this many times as long as the
#: conversation's own JSON text, plus this many characters of markup (system prompts, headers).
TEMPLATE_CHARS_PER_INPUT_CHAR = 16
TEMPLATE_MARKUP_CHARS = 1 << 20
#: Widest integer a template may compute, in bits (Python prints at most 4300 digits).
MAX_TEMPLATE_INT_BITS = 8192
#: Deepest nesting of calls (macros, caller(), recursive loops) in one render.
MAX_TEMPLATE_DEPTH = 64

# -- images ---------------------------------------------------------------------------------------
#: Most pixels of one decoded image or video frame (checked before decoding; 64M).
MAX_IMAGE_PIXELS = 1 << 26
#: Most frames of one video, and most images plus videos in one row.
MAX_VIDEO_FRAMES = 256
MAX_VISUALS_PER_ROW = 64
#: Largest aspect ratio of an image or frame (the Qwen-VL processors' limit).
MAX_ASPECT_RATIO = 200
#: Most pixels one row's images and frames may hold together (128 frames of 1080p), checked from
#: their headers before decoding, and most bytes of float32 patches they may make once encoded.
MAX_ROW_PIXELS = 1 << 28
MAX_ROW_PATCH_BYTES = 1 << 30
#: Largest M-RoPE ``tokens_per_second`` and seconds per temporal patch (their product spaces the
#: temporal ids of a video; the released Qwen2.5-VL configs use 2 and 1-2 s).
MAX_TOKENS_PER_SECOND = 10_000.0
MAX_SECONDS_PER_GRID = 3600.0
#: Most tokens a described M-RoPE layout may hold, and most whose ids are listed in full.
MAX_MROPE_TOKENS = 1 << 20
MAX_MROPE_TOKENS_SHOWN = 4096

# -- energon preparation -------------------------------------------------------------------------
#: Most samples per WebDataset shard.
MAX_SHARD_SIZE = 1_000_000

# -- smoke test ----------------------------------------------------------------------------------
#: Rows the smoke test reads per size.
SMOKE_ROWS: dict[str, int] = {"tiny": 12, "small": 32, "medium": 96}
#: Longest smoke run an MCP client may ask for, in seconds.
MAX_SMOKE_SECONDS = 3600.0

# -- MCP work ------------------------------------------------------------------------------------
#: Longest time limit an MCP client may give a tool that reads or writes data, in seconds, and the
#: default (the work stops at its next row when the limit passes or the client cancels).
MAX_TOOL_SECONDS = 3600.0
#: Longest ``seqpack mcp --lifetime`` (HTTP), in seconds (a year; omit it to serve until stopped).
MAX_SERVER_LIFETIME_S = 365 * 86400.0
DEFAULT_TOOL_SECONDS = 600.0
#: Most MCP jobs (tools that read or write data) running at once in one server; the others wait.
MAX_CONCURRENT_JOBS = 2

__all__ = [name for name in dir() if name.isupper()]
