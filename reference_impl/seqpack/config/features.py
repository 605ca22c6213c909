"""Which packing features each Megatron-Bridge target has: the version table of the docs and the skill.

One :class:`Feature` per packing path or version-dependent behaviour, with what the release the upstream
lane checks (megatron-bridge 0.6.2 / megatron-core 0.19.2) and Bridge ``main`` do. The release column is
checked in the lane (``tests/upstream/test_diff_validate.py`` builds the released classes and runs their
validation and loaders); the ``main`` column names the commit or pull request it was read at, which the
lane cannot check. The rules that enforce a "not in this version" verdict are listed per feature. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqpack.core.textfmt import markdown_table
from seqpack.core.versions import BRIDGE_MAIN, BRIDGE_MAIN_COMMIT, BRIDGE_RELEASE, MCORE_MAIN_COMMIT, MCORE_RELEASE


@dataclass(frozen=True)
class Feature:
    """A packing feature and its availability per ``--bridge-version`` target."""

    id: str
    title: str
    switch: str
    availability: dict[str, str]
    rules: tuple[str, ...] = ()
    behaviour: bool = False  # an upstream behaviour, not a switch a config turns on (nothing to refuse)

    def has(self, target: str) -> bool:
        """True when the target has the feature (its cell starts with "yes")."""
        return self.availability[target].startswith("yes")


_MAIN = f"main {BRIDGE_MAIN_COMMIT[:7]}"

FEATURES: tuple[Feature, ...] = (
    Feature("offline", "offline packed SFT (GPT-SFT datasets)",
            "dataset.enable_offline_packing + offline_packing_specs",
            {BRIDGE_RELEASE: "yes", BRIDGE_MAIN: f"yes ({_MAIN})"}),
    Feature("in_batch", "runtime in-batch packing, Direct-HF / MockVLM / Energon collate",
            "dataset.enable_in_batch_packing",
            {BRIDGE_RELEASE: "yes", BRIDGE_MAIN: f"yes ({_MAIN})"}),
    Feature("in_batch_gpt_sft", "runtime in-batch packing of GPT-SFT datasets", "dataset.enable_in_batch_packing "
            "on kind gpt_sft",
            {BRIDGE_RELEASE: "no: GPTSFTDatasetConfig has no enable_in_batch_packing",
             BRIDGE_MAIN: "yes, since PR #5493"},
            ("PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION",)),
    Feature("energon", "Energon native packing (Qwen-VL task encoder)", "dataset.packing_buffer_size",
            {BRIDGE_RELEASE: "no: no task encoder implements the packing hooks (megatron-energon 7.4.1 asserts "
             "them when the loader is built)",
             BRIDGE_MAIN: f"yes ({_MAIN})"},
            ("PACK-ENERGON-NATIVE-BRIDGE-VERSION",)),
    Feature("energon_mtp", "Energon native packing with MTP", "packing_buffer_size + model.mtp_num_layers",
            {BRIDGE_RELEASE: "no (no Energon native packing)",
             BRIDGE_MAIN: f"yes, since PR #5990 (merged 2026-09-07; {_MAIN} refuses it)"},
            ("PACK-ENERGON-NATIVE-BRIDGE-VERSION", "PACK-ENERGON-NO-MTP")),
    Feature("global_batch", "global-batch online packing (DP-balanced scheduler)",
            "dataset.enable_global_batch_packing",
            {BRIDGE_RELEASE: f"no: in no release (megatron-core {MCORE_RELEASE} has no sequence_packing_scheduler "
             "nor DpBalancedScheduler)",
             BRIDGE_MAIN: f"no on Bridge main (PR #6127 open); the scheduler is Megatron-LM main's "
             f"({MCORE_MAIN_COMMIT[:8]}), which seqpack's own global-batch path runs"},
            ("PACK-GLOBAL-BRIDGE-VERSION", "PACK-GLOBAL-BRIDGE-PR")),
    Feature("pad_between_seqs", "pad_between_seqs in packed batches", "(emitted by the collate)",
            {BRIDGE_RELEASE: "no: the packed collate emits no pad_between_seqs (megatron-core 0.19.2's "
             "PackedSeqParams has the field)",
             BRIDGE_MAIN: "yes, since PR #5610"}, behaviour=True),
    Feature("offline_padding_mask", "padding_mask in offline packed batches", "(emitted by the collate)",
            {BRIDGE_RELEASE: "no: the packed collate emits no padding_mask",
             BRIDGE_MAIN: "yes, since PR #5470 (seqpack: bridge_version=main)"}, behaviour=True),
    Feature("eos_input_loss", "loss on labels whose input is EOS (packed collate)", "(the collate's loss mask)",
            {BRIDGE_RELEASE: "no: loss 0 wherever the input token is EOS",
             BRIDGE_MAIN: "yes, since PR #5213: the stored mask as is (seqpack: bridge_version=main)"},
            behaviour=True),
    Feature("supervised_trailing_eos", "a supervised trailing EOS counts in the logical length (packed collate)",
            "(the collate's cu_seqlens_q)",
            {BRIDGE_RELEASE: "no: the logical length ends at the last input that is not EOS",
             BRIDGE_MAIN: "yes, since PR #5610 (seqpack: bridge_version=main)"}, behaviour=True),
    Feature("unsupervised_completion_refused", "refusal of a non-empty completion left without a supervised token",
            "(prompt/completion preprocessing)",
            {BRIDGE_RELEASE: "no: packed with an all-zero loss mask",
             BRIDGE_MAIN: "yes, since PR #5737 (seqpack pack --bridge-version main)"}, behaviour=True),
    Feature("global_batch_alignment", "global-batch per-sample alignment", "(global-batch padding multiple)",
            {BRIDGE_RELEASE: "no global-batch packing",
             BRIDGE_MAIN: "PR #6127: 2*CP (1 when CP = 1) times TP under SP, a product; 2*DP*CP times TP with "
             "dynamic CP (provisional)"}, ("PACK-GLOBAL-DYNAMIC-CP",), behaviour=True),
    Feature("moe_mask_graph_guard", "refusal of packed MoE padding masks under router-scoped TE graphs",
            "num_moe_experts + cuda_graph_scope moe_router",
            {BRIDGE_RELEASE: "no: gpt_step passes no padding mask to the model (nothing to refuse)",
             BRIDGE_MAIN: f"yes ({_MAIN}, gpt_step)"},
            ("PACK-MOE-MASK-CUDA-GRAPH",), behaviour=True),
)


def features_markdown() -> str:
    """The feature table: one row per feature, one column per ``--bridge-version`` target."""
    head = ["feature", "switch", f"megatron-bridge {BRIDGE_RELEASE} (checked in the lane)",
            "Bridge main (read, not checkable in the lane)", "rules"]
    rows = [[f.title, f.switch, f.availability[BRIDGE_RELEASE], f.availability[BRIDGE_MAIN],
             ", ".join(f"`{r}`" for r in f.rules)] for f in FEATURES]
    return markdown_table(head, rows)
