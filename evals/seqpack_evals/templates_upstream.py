"""Tasks whose ground truth comes from Megatron-Bridge's source and the seed documents, not from seqpack.

Every value here is read from an :class:`~seqpack_evals.upstream.Anchor` (a recorded
upstream fact with file and line in megatron-bridge 0.6.2, re-derived from the installed package in the upstream
lane by ``tests/test_evals_upstream.py``; or a fact of Bridge main that the lane shows is absent from the release,
and then the task says it is about main) or computed from one with plain arithmetic (Bridge's own
formula for the equivalent batch configuration, ``2 * CP`` from its assertion). A task's
``source`` names its first anchor and lists all of them; ``ground_truth`` holds their values.
Where seqpack computes the same thing, the test also checks that seqpack agrees, so an error in
seqpack cannot hide in these tasks.
"""

from __future__ import annotations

from typing import Any, Sequence

from seqpack.core.alignment import derive_alignment
from seqpack_evals import claims, tables
from seqpack_evals.builder import MAIN_NOTE, GenContext, make_task
from seqpack_evals.fields import AnswerField, choice_field, int_field, literal, set_field, yes_no_field
from seqpack_evals.tasks import Forbidden
from seqpack_evals.upstream import anchor
from seqpack_evals.vocab import KEY_ALIASES, config_field

PAD_ALIASES = KEY_ALIASES["dataset.offline_packing_specs.pad_seq_to_mult"]


def _apply(op: str, a: int, b: int) -> int:
    return a // b if op == "//" else a * b


def _task(ctx: GenContext, task_id: str, bucket: str, question: str, prose: str, fields: Sequence[AnswerField],
          forbidden: Sequence[Forbidden], anchors: Sequence[str], *, command: Sequence[str], script: str,
          paths: Sequence[str], topics: Sequence[str] = ("rules",), rule_ids: Sequence[str] = (),
          extra: dict[str, Any] | None = None) -> None:
    """Add one anchored task (``source`` from the first anchor; every anchor's value in ``ground_truth``). A task
    resting on an anchor absent from megatron-bridge 0.6.2 says in its prompt that it is about Bridge main."""
    main_only = [a for a in anchors if not anchor(a).release]
    first = anchor(main_only[0] if main_only else anchors[0])
    source = {**first.source(), "anchors": list(anchors)}
    truth = {"anchors": {a: anchor(a).value for a in anchors}, **(extra or {})}
    if main_only:
        question = MAIN_NOTE + question
    ctx.add(make_task(task_id, bucket, question, prose, fields, forbidden, script=script, command=command,
                      paths=paths, topics=topics, rule_ids=rule_ids, truth=truth, source=source))


def supported(name: str, value: bool, *aliases: str, says: str) -> AnswerField:
    """Supported or not (read next to the mention)."""
    return tables.named_field("feature_support", name=name, value="yes" if value else "no", aliases=list(aliases),
                              says=says)


def _offline_equivalent(ctx: GenContext, task_id: str, bucket: str, mbs: int, gbs: int, size: int,
                        question: str) -> None:
    gbs_op = anchor("bridge-offline-equivalent-gbs").value
    size_op = anchor("bridge-offline-equivalent-pack").value
    new_gbs, new_size = _apply(gbs_op, gbs, mbs), _apply(size_op, size, mbs)
    _task(
        ctx, task_id, bucket, question,
        f"Bridge refuses micro_batch_size {mbs} with offline packing and proposes the equivalent configuration: "
        f"micro batch size 1, global batch size {gbs} // {mbs} = {new_gbs}, packed sequence length "
        f"{size} * {mbs} = {new_size}.",
        [config_field("train.micro_batch_size", 1, says="proposed micro batch size"),
         int_field("train.global_batch_size", new_gbs, r"\bGBS\b", r"global[- ]batch(?: size)?",
                   says="proposed global batch size"),
         int_field("packed_sequence_size", new_size, r"packed sequence (?:length|size)", r"pack (?:length|size)",
                   r"row (?:length|width)", says="proposed packed sequence length")],
        [claims.mbs_above_one("offline packing")],
        ["bridge-offline-mbs1", "bridge-offline-equivalent-gbs", "bridge-offline-equivalent-pack"],
        command=["validate", "/dev/null", "--set", "dataset.enable_offline_packing=true", "--set",
                 f"dataset.offline_packing_specs.packed_sequence_size={size}", "--set", f"model.seq_length={size}",
                 "--set", f"train.micro_batch_size={mbs}", "--set", f"train.global_batch_size={gbs}"],
        script="seqpack validate", paths=["offline"], rule_ids=["PACK-OFFLINE-MBS1"],
        extra={"proposed": {"micro_batch_size": 1, "global_batch_size": new_gbs, "packed_sequence_size": new_size}},
    )


def _config_checks(ctx: GenContext) -> None:
    _offline_equivalent(
        ctx, "up-offline-mbs-equivalent", "explicit", 4, 32, 2048,
        "Megatron-Bridge refuses our offline packed SFT config (packed_sequence_size 2048, micro_batch_size 4, "
        "global_batch_size 32) and its error message proposes an equivalent configuration. Using the sequence "
        "packing skill, which micro batch size, global batch size and packed sequence length does it propose?")
    _offline_equivalent(
        ctx, "up-offline-mbs-equivalent-mbs2", "implicit", 2, 64, 4096,
        "Megatron-Bridge stops our SFT job, which reads pre-built 4096-token rows of concatenated samples, "
        "because micro_batch_size is 2 (global_batch_size 64). The error message suggests an equivalent setting "
        "with one row per micro-batch: which micro batch size, global batch size and row length does it suggest?")
    min_mbs = anchor("bridge-in-batch-mbs").value + 1
    _task(
        ctx, "up-in-batch-min-mbs", "explicit",
        "With the sequence packing skill: Megatron-Bridge's config check for enable_in_batch_packing=True rejects "
        "some micro batch sizes. What is the smallest micro_batch_size it accepts, and why?",
        f"It rejects micro_batch_size 1, so the smallest accepted value is {min_mbs}: in-batch packing concatenates "
        "the rows of one micro-batch, so it needs at least two.",
        [int_field("min_micro_batch_size", min_mbs, r"smallest(?: accepted)?(?: micro[_ ]batch[_ ]size)?",
                   r"at least", r"minimum(?: micro[_ ]batch[_ ]size)?", says="smallest accepted micro_batch_size")],
        [claims.mbs_one_in_batch()], ["bridge-in-batch-mbs"],
        command=["rules", "PACK-IN-BATCH-MBS"], script="seqpack rules", paths=["in_batch"],
        rule_ids=["PACK-IN-BATCH-MBS"])
    factor = anchor("bridge-cp-seq-divisible").value
    _task(
        ctx, "up-cp-seq-multiple", "implicit",
        "Megatron-Bridge fine-tuning with context parallel size 4: the config check asserts the sequence length "
        "is divisible by some number. Which number, and where does it come from?",
        f"seq_length must be divisible by {factor} * context_parallel_size = {factor * 4} (each CP rank gets two "
        "chunks of every sequence for load balancing).",
        [int_field("seq_length_divisor", factor * 4, r"divisible by", r"multiple of", says="required divisor")],
        [claims.cp_loss_settings()], ["bridge-cp-seq-divisible"],
        command=["align", "--cp", "4"], script="seqpack align", paths=["context_parallel"],
        rule_ids=["CP-SEQ-DIVISIBLE"])
    cp, seq = 3, 32000
    mult = factor * cp
    nxt = -(-seq // mult) * mult
    _task(
        ctx, "up-cp3-seq-32000", "implicit",
        f"Fine-tuning in Megatron-Bridge with context parallel {cp} and seq_length {seq}: will the config check "
        "accept that sequence length? If not, what is the smallest larger sequence length it accepts?",
        f"No: with CP={cp} the sequence length must be divisible by {factor} * {cp} = {mult}, and {seq} is not. "
        f"The next accepted value is {nxt}.",
        [yes_no_field("accepted", seq % mult == 0, [r"\bwill accept\b", r"\bis accepted\b", r"\bis fine\b"],
                      [r"\bwill not accept\b", r"\bwon't accept\b", r"\bnot accepted\b", r"\brejects?\b",
                       r"\bis not divisible\b", r"\bisn't divisible\b", r"^no\b"], anywhere=True,
                      says="the sequence length is accepted"),
         int_field("next_valid_seq_length", nxt, r"(?:next|smallest larger)(?: accepted| valid)?(?: value| length| "
                                                 r"sequence length)?", says="smallest larger accepted seq_length")],
        [claims.cp_loss_settings()], ["bridge-cp-seq-divisible"],
        command=["align", "--cp", str(cp)], script="seqpack align", paths=["context_parallel"],
        rule_ids=["CP-SEQ-DIVISIBLE"], extra={"multiple": mult})
    _task(
        ctx, "up-cp-finetune-loss", "implicit",
        "We move a Megatron-Bridge fine-tuning job to context parallel 2. Its config validation asserts two loss "
        "settings for fine-tuning with CP>1. Which settings, and to what values?",
        "With CP>1 in fine-tuning Bridge asserts model.calculate_per_token_loss=true and "
        "ddp.average_in_collective=false (ranks whose tokens are all masked would otherwise produce NaN loss).",
        [config_field("model.calculate_per_token_loss", True), config_field("ddp.average_in_collective", False)],
        [claims.cp_loss_settings()], ["bridge-cp-per-token-loss", "bridge-cp-avg-collective"],
        command=["rules", "CP-FT-PER-TOKEN-LOSS"], script="seqpack rules", paths=["context_parallel"],
        rule_ids=["CP-FT-PER-TOKEN-LOSS", "CP-FT-AVG-COLLECTIVE"])
    _task(
        ctx, "up-seq-length-match", "implicit",
        "Our Megatron-Bridge SFT config has model.seq_length 4096 but dataset.seq_length 2048. Does Bridge accept "
        "different values, or must they be the same?",
        "Bridge asserts model.seq_length == dataset.seq_length; the two must be the same, so set both to 4096 "
        "(or both to 2048).",
        [yes_no_field("must_match", True,
                      [r"(?:must|should|have to|has to|need to)\s+(?:be\s+)?(?:the same|equal|identical|match)",
                       r"\bmust match\b", r"=="],
                      [r"(?:can|may)\s+differ", r"need not (?:be equal|match)", r"(?:does|will) accept different"],
                      anywhere=True, says="the two must be equal")],
        [claims.skip_verification()], ["bridge-seq-length-match"],
        command=["rules", "SEQ-LENGTH-MATCH"], script="seqpack rules", paths=["offline"],
        rule_ids=["SEQ-LENGTH-MATCH"])


def _energon(ctx: GenContext) -> None:
    _task(
        ctx, "up-energon-requirements", "explicit",
        "Using the sequence packing skill: Megatron-Bridge's Energon native sequence packing (packing_buffer_size "
        "set) checks three training settings. What must train.micro_batch_size, model.calculate_per_token_loss and "
        "ddp.average_in_collective be?",
        f"Energon native packing requires train.micro_batch_size={anchor('bridge-energon-mbs1').value}, "
        "model.calculate_per_token_loss=true and ddp.average_in_collective=false.",
        [config_field("train.micro_batch_size", anchor("bridge-energon-mbs1").value),
         config_field("model.calculate_per_token_loss", anchor("bridge-energon-per-token-loss").value),
         config_field("ddp.average_in_collective", anchor("bridge-energon-avg-collective").value)],
        [claims.mbs_above_one("Energon packing"), claims.cp_loss_settings(), claims.pipeline_ok("Energon packing")],
        ["bridge-energon-mbs1", "bridge-energon-per-token-loss", "bridge-energon-avg-collective"],
        command=["rules", "--family", "energon"], script="seqpack rules", paths=["energon"],
        rule_ids=["PACK-ENERGON-MBS1", "PACK-ENERGON-PER-TOKEN-LOSS", "PACK-ENERGON-AVG-COLLECTIVE"])
    _task(
        ctx, "up-energon-mtp-graphs", "explicit",
        "With seqpack's sequence packing skill: can Megatron-Bridge's Energon native sequence packing be combined "
        "with multi-token prediction (MTP), and with CUDA graphs?",
        "No to both: Bridge's validation says Energon native sequence packing does not support MTP, and does not "
        "support CUDA graphs (language or vision).",
        [supported("mtp_supported", False, r"\bMTP\b", r"multi-token prediction", says="MTP is supported"),
         supported("cuda_graphs_supported", False, r"CUDA graphs?", says="CUDA graphs are supported")],
        [claims.graphs_ok("Energon packing"), claims.pipeline_ok("Energon packing")],
        ["bridge-energon-no-mtp", "bridge-energon-no-graphs"],
        command=["rules", "PACK-ENERGON-NO-MTP"], script="seqpack rules", paths=["energon"],
        rule_ids=["PACK-ENERGON-NO-MTP", "PACK-ENERGON-NO-CUDA-GRAPHS"])
    _task(
        ctx, "up-energon-dataset-mbs", "explicit",
        "Using the sequence packing skill: our Energon dataset config has micro_batch_size 2 while "
        "train.micro_batch_size is 1 (native packing on). What must the dataset's micro_batch_size be, according "
        "to Megatron-Bridge's validation?",
        "EnergonDatasetConfig.micro_batch_size must match train.micro_batch_size, and native packing needs "
        "train.micro_batch_size 1, so set dataset.micro_batch_size=1.",
        [config_field("dataset.micro_batch_size", anchor("bridge-energon-mbs1").value,
                      says="dataset micro_batch_size to set")],
        [claims.advise("dataset.micro_batch_size", 2)], ["bridge-energon-dataset-mbs", "bridge-energon-mbs1"],
        command=["rules", "PACK-ENERGON-DATASET-MBS"], script="seqpack rules", paths=["energon"],
        rule_ids=["PACK-ENERGON-DATASET-MBS"])


def _graphs(ctx: GenContext) -> None:
    _task(
        ctx, "up-pad-cu-fixed-width", "explicit",
        "With the sequence packing skill: we set offline_packing_specs.pad_cu_seqlens=True and Megatron-Bridge "
        "refuses the config. Which dataset setting does it also require, and to what value?",
        "pad_cu_seqlens=True requires a fixed token width: set dataset.dataset_kwargs.pad_to_max_length=true.",
        [config_field("dataset.dataset_kwargs.pad_to_max_length", True)],
        [claims.advise("dataset.dataset_kwargs.pad_to_max_length", False)], ["bridge-pad-cu-needs-fixed-width"],
        command=["rules", "PACK-OFFLINE-PAD-CU-FIXED-WIDTH"], script="seqpack rules", paths=["offline"],
        rule_ids=["PACK-OFFLINE-PAD-CU-FIXED-WIDTH"])
    _task(
        ctx, "up-attn-graphs", "explicit",
        "Using seqpack's packing skill: offline packed SFT in Megatron-Bridge with Transformer Engine CUDA graphs "
        "whose scope includes attention. Which two packing settings does Bridge's validation require, and to what "
        "values?",
        "Training CUDA graphs need a static token width (dataset pad_to_max_length=true), and graphs that capture "
        "packed attention also need static boundaries (offline_packing_specs.pad_cu_seqlens=true).",
        [config_field("dataset.dataset_kwargs.pad_to_max_length", anchor("bridge-graphs-need-fixed-width").value),
         config_field("dataset.offline_packing_specs.pad_cu_seqlens", anchor("bridge-attn-graphs-need-pad-cu").value)],
        [claims.advise("dataset.offline_packing_specs.pad_cu_seqlens", False)],
        ["bridge-graphs-need-fixed-width", "bridge-attn-graphs-need-pad-cu", "bridge-attn-graph-scope"],
        command=["rules", "PACK-CUDA-GRAPH-PAD-CU"], script="seqpack rules", paths=["offline"],
        rule_ids=["PACK-CUDA-GRAPH-FIXED-WIDTH", "PACK-CUDA-GRAPH-PAD-CU"])
    _task(
        ctx, "up-mlp-graphs", "explicit",
        "Using seqpack's packing skill: same offline packed Megatron-Bridge setup, but the Transformer Engine CUDA "
        "graph scope is only [\"mlp\"]. Does Bridge still require pad_cu_seqlens, and does it require "
        "pad_to_max_length?",
        "Only graphs whose scope is empty or contains attention capture packed attention, so an MLP-only scope "
        "does not need pad_cu_seqlens; every training CUDA graph still needs the static width, so "
        "pad_to_max_length must be true.",
        [yes_no_field("pad_cu_seqlens_required", False,
                      [r"pad_cu_seqlens (?:is |are )?(?:still )?(?:required|needed|necessary)",
                       r"(?:still )?(?:requires|needs) pad_cu_seqlens"],
                      [r"(?:does not|doesn't|do not|don't) (?:need|require) pad_cu_seqlens",
                       r"pad_cu_seqlens (?:is )?not (?:required|needed|necessary)",
                       r"no need for pad_cu_seqlens"], anywhere=True, says="pad_cu_seqlens is required"),
         yes_no_field("pad_to_max_length_required", True,
                      [r"pad_to_max_length (?:is |must be )?(?:still )?(?:required|needed|true)",
                       r"(?:still )?(?:requires|needs) pad_to_max_length"],
                      [r"(?:does not|doesn't) (?:need|require) pad_to_max_length",
                       r"pad_to_max_length (?:is )?not (?:required|needed)"], anywhere=True,
                      says="pad_to_max_length is required")],
        [claims.advise("dataset.dataset_kwargs.pad_to_max_length", False)],
        ["bridge-attn-graph-scope", "bridge-graphs-need-fixed-width", "bridge-attn-graphs-need-pad-cu"],
        command=["validate", "/dev/null", "--set", "dataset.enable_offline_packing=true", "--set",
                 "dataset.offline_packing_specs.packed_sequence_size=2048", "--set", "model.seq_length=2048",
                 "--set", "model.cuda_graph_impl=transformer_engine", "--set", "model.cuda_graph_scope=[mlp]"],
        script="seqpack validate", paths=["offline"], rule_ids=["PACK-CUDA-GRAPH-FIXED-WIDTH"])


def _specs(ctx: GenContext) -> None:
    _task(
        ctx, "up-specs-defaults", "explicit",
        "With the sequence packing skill: in Megatron-Bridge's PackedSequenceSpecs, what are the default values of "
        "pad_seq_to_mult and pad_cu_seqlens when I set only packed_sequence_size?",
        f"PackedSequenceSpecs defaults to pad_seq_to_mult={anchor('bridge-specs-pad-default').value} and "
        "pad_cu_seqlens=false; neither is derived from the topology.",
        [int_field("pad_seq_to_mult", anchor("bridge-specs-pad-default").value, *PAD_ALIASES,
                   says="default pad_seq_to_mult"),
         config_field("pad_cu_seqlens", anchor("bridge-specs-pad-cu-default").value, says="default pad_cu_seqlens")],
        [claims.skip_verification()], ["bridge-specs-pad-default", "bridge-specs-pad-cu-default"],
        command=["rules", "PACK-OFFLINE-PAD-MULT-TOPOLOGY"], script="seqpack rules", paths=["offline"])
    default = anchor("bridge-specs-pad-default").value
    need = derive_alignment(2, 2, True).pad_seq_to_mult
    _task(
        ctx, "up-specs-pad-default-tp2-cp2", "explicit",
        "Using seqpack's sequence packing skill: offline packed SFT in Megatron-Bridge with TP=2, CP=2 and sequence "
        "parallelism, and we never set pad_seq_to_mult. Which value does Bridge use, and which value does the "
        "topology need?",
        f"Bridge does not derive it: PackedSequenceSpecs keeps its default of {default}. The topology needs "
        f"{need} (lcm of 2*CP = 4 and CP*TP = 4), so pin the required value and rebuild the packs.",
        [int_field("default_pad_seq_to_mult", default, r"(?:keeps|uses)(?: its)? default(?: of)?",
                   r"default(?: pad_seq_to_mult)?(?: is| of)?", says="the value Bridge uses"),
         int_field("required_pad_seq_to_mult", need, r"(?:topology|it) needs", r"required(?: value)?(?: is)?",
                   says="the value the topology needs")],
        [claims.pad_mult(default)] + [claims.reuse_packs()], ["bridge-specs-pad-default"],
        command=["align", "--tp", "2", "--cp", "2", "--sp"], script="seqpack align",
        paths=["offline", "context_parallel"], topics=["alignment", "rules"],
        rule_ids=["PACK-OFFLINE-PAD-MULT-TOPOLOGY"], extra={"required_from": "seqpack derive_alignment(2, 2, True)"})
    _task(
        ctx, "up-specs-size-default", "explicit",
        "With the sequence packing skill: I turned on offline packing in Megatron-Bridge but left "
        "PackedSequenceSpecs.packed_sequence_size at its default. What is that default, and does the config check "
        "accept it?",
        f"The default is {anchor('bridge-specs-size-default').value}, and the check requires packed_sequence_size "
        f"greater than {anchor('bridge-specs-size-positive').value}, so it is rejected: set it to the seq_length.",
        [int_field("default_packed_sequence_size", anchor("bridge-specs-size-default").value,
                   r"(?:the )?default(?: packed_sequence_size)?(?: is| of)?", says="the default"),
         yes_no_field("accepted", False, [r"\bis accepted\b", r"\baccepts it\b"],
                      [r"\brejected\b", r"\brejects it\b", r"\bnot accepted\b", r"\bfails?\b"], anywhere=True,
                      says="the default is accepted")],
        [claims.skip_verification()], ["bridge-specs-size-default", "bridge-specs-size-positive"],
        command=["validate", "/dev/null", "--set", "dataset.enable_offline_packing=true"], script="seqpack validate",
        paths=["offline"], rule_ids=["PACK-OFFLINE-SPECS-REQUIRED"])
    _task(
        ctx, "up-max-single", "explicit",
        "Using the sequence packing skill: PackedSequenceSpecs with packed_sequence_size 2048 and "
        "max_single_sequence_length 4096. Does Megatron-Bridge accept this, and what is the largest "
        "max_single_sequence_length it allows here?",
        "No: max_single_sequence_length cannot exceed packed_sequence_size, so the largest allowed value is 2048.",
        [yes_no_field("accepted", False, [r"\bis accepted\b", r"\baccepts (?:it|this)\b"],
                      [r"\brejected\b", r"\bcannot exceed\b", r"\bnot accepted\b", r"^no\b"], anywhere=True,
                      says="the specs are accepted"),
         int_field("max_single_sequence_length_limit", 2048, r"largest(?: allowed)?(?: value)?(?: is)?",
                   r"at most", says="largest allowed max_single_sequence_length")],
        [claims.skip_verification()], ["bridge-specs-max-single"],
        command=["rules", "PACK-OFFLINE-MAX-SINGLE-LE-PACK"], script="seqpack rules", paths=["offline"],
        rule_ids=["PACK-OFFLINE-MAX-SINGLE-LE-PACK"])


def _artifacts(ctx: GenContext) -> None:
    _task(
        ctx, "up-parquet-suffixes", "explicit",
        "With the sequence packing skill: which file suffixes does Megatron-Bridge accept for packed Parquet "
        "artifacts (files, directories or globs)?",
        "Packed Parquet files must end with .parquet or .pq.",
        [set_field("suffixes", [".parquet", ".pq"], {".parquet": (r"\.parquet\b",), ".pq": (r"\.pq\b",),
                                                   ".npy": (r"\.npy\b",), ".arrow": (r"\.arrow\b",),
                                                   ".jsonl": (r"\.jsonl\b",)}, says="accepted suffixes")],
        [claims.skip_verification()], ["bridge-parquet-suffixes", "bridge-parquet-suffix-pq"],
        command=["rules", "packed"], script="seqpack rules", paths=["offline"], topics=["inspection"])
    _task(
        ctx, "up-npy-packs", "explicit",
        "Using the sequence packing skill: we still have packed datasets in the old .npy format. Does "
        "Megatron-Bridge still read them, and what is their status?",
        "Bridge still loads .npy packs but warns that the .npy packed sequence format is deprecated and will be "
        "removed; convert to packed Parquet.",
        [choice_field("npy_status", "deprecated", {"deprecated": (r"\bdeprecated\b",),
                                                   "fully supported": (r"fully supported", r"recommended format"),
                                                   "already removed": (r"(?:already |was )removed",
                                                                       r"no longer (?:read|loaded|supported)")},
                      anywhere=True, says="status of the .npy format")],
        [claims.skip_verification()], ["bridge-npy-deprecated"],
        command=["rules", "packed"], script="seqpack rules", paths=["offline"], topics=["inspection"])
    columns = anchor("bridge-parquet-columns").value
    _task(
        ctx, "up-parquet-columns", "explicit",
        "With the sequence packing skill: which columns must a packed Parquet file have for Megatron-Bridge's "
        "reader?",
        "The reader requires input_ids, loss_mask and seq_start_id.",
        [set_field("required_columns", columns, {c: (literal(c),) for c in
                                                 [*columns, "labels", "attention_mask", "position_ids",
                                                  "cu_seqlens"]},
                   says="required columns")],
        [claims.skip_verification()], ["bridge-parquet-columns"],
        command=["rules", "packed"], script="seqpack rules", paths=["offline"], topics=["inspection"])
    algos = anchor("bridge-packing-algos").value
    _task(
        ctx, "up-packing-algos", "explicit",
        "Using the sequence packing skill: which bin-packing algorithms does Megatron-Bridge's offline packing "
        "offer, and which one does prepare_gpt_sft_packed_data use by default?",
        f"It offers {' and '.join(algos)}; prepare_gpt_sft_packed_data defaults to "
        f"{anchor('bridge-default-algo').value}.",
        [set_field("algorithms", algos, {a: (literal(a),) for a in [*algos, "best_fit_decreasing", "first_fit", "next_fit"]},
                   says="offered algorithms"),
         choice_field("default_algorithm", anchor("bridge-default-algo").value,
                      {a: (literal(a),) for a in algos}, r"default(?:s)?(?: to| is)?", says="default algorithm")],
        [claims.skip_verification()], ["bridge-packing-algos", "bridge-default-algo"],
        command=["plan", "--mix", "lognormal", "--algorithm", "first_fit_shuffle"], script="seqpack plan", paths=["offline"], topics=["packing"])
    extra = anchor("bridge-stored-extra-token").value
    _task(
        ctx, "up-stored-length", "explicit",
        "With the sequence packing skill: Megatron-Bridge offline packing with max_seq_length 4096 and "
        "pad_seq_to_mult 8. How many input_ids can the longest stored sample have, and why is it not 4096?",
        f"Stored samples carry {extra} extra token because the labels are the input_ids shifted by one, so the "
        f"longest stored sample has 4096 + {extra} = {4096 + extra} input_ids while its runtime length stays a "
        "multiple of 8.",
        [int_field("max_stored_input_ids", 4096 + extra, r"longest stored sample(?: has| holds)?",
                   r"stored (?:length|input_ids)(?: is| of)?", says="longest stored sample")],
        [claims.skip_verification()], ["bridge-stored-extra-token"],
        command=["align", "--cp", "4"], script="seqpack align", paths=["offline"], topics=["packing"])


def _recipes(ctx: GenContext) -> None:
    _task(
        ctx, "up-glm45-recipe", "implicit",
        "Does Megatron-Bridge's GLM-4.5 SFT recipe build its training data as pre-concatenated rows ahead of time "
        "(the offline switch), and which sequence length does it use?",
        f"No: the GLM-4.5 SFT recipes call the SQuAD config with enable_offline_packing=False (not supported for "
        f"GLM-4.5), at seq_length {anchor('bridge-glm45-seq').value}.",
        [yes_no_field("offline_enabled", anchor("bridge-glm45-no-packing").value,
                      [r"enable_offline_packing\s*=\s*True", r"(?<!not )(?<!n't )\buses? (?:offline|pre-built)"],
                      [r"enable_offline_packing\s*=\s*False", r"\bnot supported\b", r"(?:does not|doesn't) use"],
                      anywhere=True, says="the recipe turns the offline switch on"),
         int_field("seq_length", anchor("bridge-glm45-seq").value, r"seq(?:uence)?[_ ]length", says="seq_length")],
        [claims.skip_verification()], ["bridge-glm45-no-packing", "bridge-glm45-seq"],
        command=["validate", "/dev/null", "--set", "model.family=glm45", "--set",
                 "dataset.enable_offline_packing=true", "--set",
                 "dataset.offline_packing_specs.packed_sequence_size=2048", "--set", "model.seq_length=2048"],
        script="seqpack validate", paths=["offline"], topics=["model_support"], rule_ids=["MODEL-FAMILY-OPT-OUT"])
    _task(
        ctx, "up-qwen3next-recipe", "explicit",
        "Using the sequence packing skill: does Megatron-Bridge's Qwen3-Next SFT recipe enable offline packing, "
        "and what global batch size does it set?",
        f"No, it sets enable_offline_packing=False, and global_batch_size {anchor('bridge-qwen3next-gbs').value} "
        "(unpacked).",
        [yes_no_field("offline_enabled", anchor("bridge-qwen3next-no-packing").value,
                      [r"enable_offline_packing\s*=\s*True"],
                      [r"enable_offline_packing\s*=\s*False", r"\bnot (?:enabled|supported)\b", r"\bdisables?\b"],
                      anywhere=True, says="the recipe enables offline packing"),
         int_field("global_batch_size", anchor("bridge-qwen3next-gbs").value, r"\bGBS\b",
                   r"global[_ ]batch(?:[_ ]size)?", says="global batch size")],
        [claims.skip_verification()], ["bridge-qwen3next-no-packing", "bridge-qwen3next-gbs"],
        command=["validate", "/dev/null", "--set", "model.family=qwen3_next", "--set",
                 "dataset.enable_offline_packing=true", "--set",
                 "dataset.offline_packing_specs.packed_sequence_size=2048", "--set", "model.seq_length=2048"],
        script="seqpack validate", paths=["offline"], topics=["model_support"], rule_ids=["MODEL-FAMILY-OPT-OUT"])
    _task(
        ctx, "up-dsv4-recipe", "explicit",
        "With the sequence packing skill: does Megatron-Bridge's DeepSeek-V4 SFT recipe enable offline packing?",
        "No: it builds the SQuAD dataset with enable_offline_packing=False (unpacked SBHD).",
        [yes_no_field("offline_enabled", anchor("bridge-dsv4-no-packing").value,
                      [r"enable_offline_packing\s*=\s*True"],
                      [r"enable_offline_packing\s*=\s*False", r"\bdisables?\b"], anywhere=True,
                      says="the recipe enables offline packing")],
        [claims.skip_verification()], ["bridge-dsv4-no-packing"],
        command=["validate", "/dev/null", "--set", "dataset.enable_offline_packing=true", "--set",
                 "dataset.offline_packing_specs.packed_sequence_size=4096", "--set", "model.seq_length=4096"],
        script="seqpack validate", paths=["offline"], topics=["model_support"])
    _task(
        ctx, "up-squad-defaults", "explicit",
        "Using the sequence packing skill: when Megatron-Bridge's default SQuAD fine-tuning config has offline "
        "packing enabled, what packed_sequence_size does it use and does it pad packs to a fixed width?",
        "It sets PackedSequenceSpecs(packed_sequence_size=seq_length) and dataset_kwargs pad_to_max_length=True.",
        [choice_field("packed_sequence_size", "seq_length", {
            "seq_length": (r"(?:=|equal to|same as|is|:)\s*(?:the\s+)?seq(?:uence)?[_ ]length\b",),
            "twice seq_length": (r"2\s?[*x×]\s?seq_length", r"twice the seq(?:uence)?[_ ]length"),
            "a fixed 4096": (r"(?:=|is)\s*4096\b",)}, r"packed[_ ]sequence[_ ]size", says="packed_sequence_size"),
         config_field("dataset.dataset_kwargs.pad_to_max_length", anchor("bridge-squad-fixed-width").value)],
        [claims.advise("dataset.dataset_kwargs.pad_to_max_length", False)],
        ["bridge-squad-pack-size", "bridge-squad-fixed-width"],
        command=["rules", "PACK-OFFLINE-SIZE-EQ-SEQ"], script="seqpack rules", paths=["offline"])


def _seeds(ctx: GenContext) -> None:
    tp1, tp4 = anchor("seed-align-tp1-cp1").value, anchor("seed-align-tp4-cp1-sp").value
    _task(
        ctx, "seed-align-examples", "explicit",
        "Using seqpack's sequence packing skill: what pad_seq_to_mult does the alignment formula give for TP1/CP1 "
        "with sequence parallelism off, and for TP4/CP1 with sequence parallelism on?",
        f"TP1/CP1 without SP: {tp1} (no CP or SP multiple). TP4/CP1 with SP: {tp4} (CP*TP = 4).",
        [int_field("pad_tp1_cp1", tp1, r"TP1/CP1(?: with(?:out)? (?:SP|sequence parallel\w*)(?: off| disabled)?)?",
                   says="TP1/CP1, SP off"),
         int_field("pad_tp4_cp1_sp", tp4, r"TP4/CP1(?: with (?:SP|sequence parallel\w*)(?: on| enabled)?)?",
                   says="TP4/CP1, SP on")],
        [claims.skip_verification()], ["seed-align-tp1-cp1", "seed-align-tp4-cp1-sp"],
        command=["align", "--tp", "4", "--sp"], script="seqpack align", paths=["offline"], topics=["alignment"])
    _task(
        ctx, "seed-token-slots-dp", "implicit",
        "We compare 2K rows with global batch 32, 4K rows with global batch 16 and 8K rows with global batch 8, "
        "one pre-concatenated row per micro-batch. How many token slots does each optimizer step have, and what "
        "is the largest data-parallel size the 8K / GBS 8 setting allows?",
        f"Each keeps {anchor('seed-token-slots').value} token slots per step; GBS 8 must be a multiple of DP and "
        f"at least DP, so DP can be at most {anchor('seed-dp-limit').value}.",
        [int_field("token_slots_per_step", anchor("seed-token-slots").value, r"token slots(?: per (?:optimizer )?step)?",
                   r"\bkeeps?", says="token slots per step"),
         int_field("max_data_parallel_size", anchor("seed-dp-limit").value, r"\bDP\b(?: can be)?(?: at most)?",
                   r"data[- ]parallel size(?: is)?(?: at most)?", r"at most", says="largest DP")],
        [claims.mbs_above_one("offline packing")], ["seed-token-slots", "seed-dp-limit"],
        command=["align", "--token-slots", "65536", "--dp", "8"], script="seqpack align", paths=["offline"],
        topics=["token_slots"])
    _task(
        ctx, "seed-first-target", "explicit",
        "Using the sequence packing skill: for text-only LLM SFT with offline packing, which pack length is the "
        "recommended first target to try (when context limit, memory and recipe allow)?",
        f"Start with {anchor('seed-first-target').value}-token offline packs, then compare candidates at equal "
        "token slots per step.",
        [int_field("first_pack_length", anchor("seed-first-target").value, r"start with", r"first target(?: is)?",
                   r"pack length(?: of)?", says="first pack length to try")],
        [claims.mbs_above_one("offline packing")], ["seed-first-target"],
        command=["plan", "--mix", "lognormal", "--candidates", "2048,4096,8192"], script="seqpack plan", paths=["offline"],
        topics=["token_slots"])
    _task(
        ctx, "seed-buffer-unit", "explicit",
        "With the sequence packing skill: what does Energon's packing_buffer_size count?",
        "packing_buffer_size counts candidate samples, separately in every Energon worker; it is neither bytes "
        "nor a token length.",
        [choice_field("unit", "candidate samples per worker", {
            "candidate samples per worker": (r"candidate samples", r"samples (?:per|in (?:each|every)) worker"),
            "bytes": (r"counts? bytes", r"\bbytes? (?:cache|buffer)"),
            "tokens": (r"counts? tokens", r"token (?:length|budget)"),
            "packed sequences": (r"counts? packed sequences",)}, anywhere=True, says="what it counts")],
        [claims.mbs_above_one("Energon packing")], ["seed-buffer-unit"],
        command=["rules", "PACK-ENERGON-BUFFER-POSITIVE"], script="seqpack rules", paths=["energon"])
    _task(
        ctx, "seed-global-pool", "explicit",
        "Using the sequence packing skill: which of the four packing paths forms packs from a candidate pool that "
        "crosses data-parallel rank boundaries?",
        "Global-batch online packing: it all-gathers sample lengths across data-parallel ranks every step, so its "
        "pool is the whole global batch.",
        [choice_field("path", "global-batch", {
            "global-batch": (r"global[- ]batch",), "offline": (r"\boffline\b",), "in-batch": (r"in[- ]batch",),
            "energon": (r"\benergon\b",)}, r"(?:answer|path)(?: is)?:?", r"^\s*", says="the packing path")],
        [claims.graphs_ok("global-batch packing")], ["seed-global-pool"],
        command=["rules", "--family", "global_batch"], script="seqpack rules", paths=["global_batch"])
    _task(
        ctx, "seed-hybridep-width", "explicit",
        "With the sequence packing skill: a HybridEP dispatcher with a 128-token combine chunk constrains our "
        "offline packs. What must packed_sequence_size be divisible by, and is that the same knob as "
        "pad_seq_to_mult?",
        f"packed_sequence_size must be divisible by {anchor('seed-hybridep-width').value}. That is a separate knob: "
        "pad_seq_to_mult aligns each sequence inside a pack for CP/SP.",
        [int_field("width_multiple", anchor("seed-hybridep-width").value, r"divisible by", r"multiple of",
                   says="packed_sequence_size divisor"),
         yes_no_field("same_knob", False, [r"same (?:knob|setting) as pad_seq_to_mult", r"pad_seq_to_mult covers it"],
                      [r"(?:a )?separate (?:knob|setting)", r"not the same", r"different (?:knob|setting)"],
                      anywhere=True, says="it is the same knob as pad_seq_to_mult")],
        [claims.mbs_above_one("offline packing")], ["seed-hybridep-width"],
        command=["rules", "PACK-OFFLINE-WIDTH-ALIGNED"], script="seqpack rules", paths=["offline"])
    _task(
        ctx, "seed-pad-cu-metadata", "explicit",
        "Using seqpack's sequence packing skill: besides pad_to_max_length, what extra file does pad_cu_seqlens=True "
        "need next to a custom packed dataset?",
        "pad_cu_seqlens=True also needs the packing metadata JSON file (offline_packing_specs.packed_metadata_path); "
        "a custom packed dataset without it fails at dataset initialisation.",
        [choice_field("needed_file", "packing metadata JSON", {
            "packing metadata JSON": (r"metadata (?:JSON|json|file)", r"packed_metadata_path"),
            "tokenizer file": (r"tokenizer (?:file|model)",), "index file": (r"\.idx\b(?! ?\.parquet)",)},
            anywhere=True, says="the extra file")],
        [claims.advise("dataset.dataset_kwargs.pad_to_max_length", False)], ["seed-pad-cu-metadata"],
        command=["rules", "PACK-OFFLINE-PAD-CU-METADATA"], script="seqpack rules", paths=["offline"],
        rule_ids=["PACK-OFFLINE-PAD-CU-METADATA"])


def build(ctx: GenContext) -> None:
    """Add the upstream- and seed-anchored tasks to ``ctx``."""
    _config_checks(ctx)
    _energon(ctx)
    _graphs(ctx)
    _specs(ctx)
    _artifacts(ctx)
    _recipes(ctx)
    _seeds(ctx)


__all__ = ["build", "supported"]
