"""``energon_prepare``: JSONL -> WebDataset shards -> a prepared Megatron-Energon dataset."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from seqpack.core.limits import MAX_SHARD_SIZE
from seqpack.core.reports import PreparedEnergonDataset
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import TOKENIZER_HELP, seed_option, tokenizer_option
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["ENERGON_PREPARE", "EnergonPrepareOptions", "energon_links", "energon_prepare", "render_energon"]


@verb_options
class EnergonPrepareOptions:
    """Input JSONL, output directory and the preparation settings.

    ``with_media`` gives about half the rows that carry no images a seeded synthetic picture (and
    an ``<image>`` marker); ``seed`` drives the validation split and the synthetic media. Rows with
    images or videos (the VLM sample contract, docs/vlm.md) keep them as shard members.
    """

    input: str | os.PathLike[str] = option(help="JSONL file (prompt/completion or chat rows; VLM rows with "
                                           "images/videos, see docs/vlm.md)", positional=True, path="file")
    out: str | os.PathLike[str] = option(help="output dataset directory (written atomically)", path="out_dir")
    with_media: bool = option(False, help="give about half the rows without images a seeded synthetic picture (and "
                              "an <image> marker)")
    shard_size: int = option(1000, help="samples per tar shard", minimum=1, maximum=MAX_SHARD_SIZE)
    val_fraction: float = option(0.0, help="fraction of rows in the val split", minimum=0.0, maximum=1.0,
                                 exclusive_maximum=True)
    seed: int = seed_option(1234, "seed of the val split and of the synthetic media")
    overwrite: bool = option(False, help="replace an existing output directory (only a dataset seqpack wrote, with "
                             "no other file in it)")
    tokenizer: Any = tokenizer_option(TOKENIZER_HELP + "; recorded in the dataset's manifest, which inspect then "
                                      "counts tokens with")


def energon_prepare(options: EnergonPrepareOptions) -> PreparedEnergonDataset:
    """Prepare the dataset (:func:`seqpack.packing.energon.prepare.prepare_energon_dataset`)."""
    from seqpack.packing.energon.media import MediaSpec
    from seqpack.packing.energon.prepare import prepare_energon_dataset

    check_options(options)
    return prepare_energon_dataset(
        options.input, options.out, media=MediaSpec(seed=options.seed) if options.with_media else None,
        shard_size=options.shard_size, val_fraction=options.val_fraction, split_seed=options.seed,
        overwrite=options.overwrite, tokenizer=options.tokenizer,
    )


def render_energon(result: PreparedEnergonDataset, options: EnergonPrepareOptions) -> str:
    """The CLI's text: where the dataset went and what it holds."""
    out = [f"wrote {result.root} in {result.seconds:.3f}s",
           text_table(["split", "samples", "shards"],
                      [[split, n, len(result.shards[split])] for split, n in result.samples.items()])]
    media = result.media
    if media:
        out.append(f"media: {media['samples_with_media']} samples with {media['images']} image(s) and "
                   f"{media['videos']} video(s) ({media['synthetic']} synthetic)")
    out.append(f"schema={result.schema} fingerprint={result.fingerprint[:16]} tokenizer: "
               f"{result.tokenizer or 'none recorded (inspect counts with the byte tokenizer unless given one)'}")
    return "\n".join(out)


def energon_links(data: dict[str, Any]) -> Iterable[tuple[str, str, str, str]]:
    """prepare_energon_dataset wrote: the dataset directory and its seqpack manifest."""
    from seqpack.packing.energon.prepare import MANIFEST_NAME

    yield data["root"], "dataset", "the prepared Energon dataset directory", "inode/directory"
    manifest = str(Path(data["root"]) / MANIFEST_NAME)
    yield manifest, "manifest", "seqpack manifest: source, counts, media, fingerprint", "application/json"


ENERGON_PREPARE = Verb(
    name="energon_prepare", options=EnergonPrepareOptions, function=energon_prepare, render=render_energon,
    extra="energon",
    help="turn JSONL (text or VLM rows with images) into a prepared Energon dataset for online packing",
    tools=(Tool(
        "prepare_energon_dataset", title="Prepare a Megatron-Energon dataset from JSONL (writes WebDataset shards)",
        writes=True, job=True, links=energon_links,
        description="""Turn JSONL into WebDataset shards and index them as a prepared Energon dataset for online packing
(like `seqpack energon-prepare`): samples and shards per split, the schema, media and a fingerprint.""",
    ),),
)
