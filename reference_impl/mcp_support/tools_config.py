"""Light MCP tools: alignment, config validation, the rule registry and model-family support.

Nothing here imports numpy, torch or pyarrow.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from reference_impl.config.model_support import PATHS
from reference_impl.config.rules import FAMILIES
from reference_impl.examples import list_examples
from reference_impl.mcp_support.errors import tool_errors
from reference_impl.mcp_support.hints import READ_ONLY
from reference_impl.mcp_support.outputs import (
    AlignmentOut,
    ExplainOut,
    ModelSupportOut,
    RuleListOut,
    ValidationOut,
)
from reference_impl.mcp_support.roots import AllowedRoots

MAX_CONFIG_CHARS = 200_000
MAX_RULES_RETURNED = 10

ParallelSize = Annotated[int, Field(ge=1, le=4096)]
FamilyName = Literal[tuple(FAMILIES)]  # type: ignore[valid-type]
PathName = Literal[tuple(PATHS)]  # type: ignore[valid-type]
ExampleName = Literal[tuple(list_examples())]  # type: ignore[valid-type]
Override = Annotated[str, Field(min_length=3, max_length=1000, pattern=r"^[A-Za-z_][\w.]*=")]


def register_config_tools(server: MCPServer, roots: AllowedRoots) -> None:
    """Add derive_alignment, validate_config, explain_rule, list_rules and check_model_support."""

    @server.tool(title="Derive pad_seq_to_mult for TP/CP/SP", annotations=READ_ONLY)
    def derive_alignment(
        tp: Annotated[ParallelSize, Field(description="tensor-parallel size")] = 1,
        cp: Annotated[ParallelSize, Field(description="context-parallel size")] = 1,
        sp: Annotated[bool, Field(description="sequence parallelism on")] = False,
        eval_cp: Annotated[ParallelSize | None, Field(description="a different CP size used for evaluation")] = None,
    ) -> AlignmentOut:
        """Per-sequence alignment multiple (pad_seq_to_mult) every packed sequence must have.

        pad_seq_to_mult = lcm(2*CP when CP>1, CP*TP when SP and TP>1) over the training and the
        evaluation CP size; the explanation shows each factor. Example: TP4/CP2/SP gives 8.
        """
        from reference_impl.alignment import derive_alignment as derive

        with tool_errors():
            return derive(tp, cp, sp, eval_cp).to_dict()  # type: ignore[return-value]

    @server.tool(title="Validate a training config against the packing rules", annotations=READ_ONLY)
    def validate_config(
        config_text: Annotated[
            str | None, Field(description="the config as YAML or JSON text", max_length=MAX_CONFIG_CHARS)
        ] = None,
        path: Annotated[str | None, Field(description="a YAML/JSON config file inside an allowed root",
                                          max_length=4096)] = None,
        example: Annotated[ExampleName | None, Field(description="a bundled example config by name")] = None,
        overrides: Annotated[
            list[Override],
            Field(description="dotted overrides applied on top, e.g. 'dataset.enable_in_batch_packing=true'",
                  max_length=200),
        ] = [],  # noqa: B006 - the SDK copies validated arguments per call
    ) -> ValidationOut:
        """Check a Megatron-Bridge-style training config against every packing rule.

        Give one of config_text, path or example (or none: the defaults), plus optional overrides.
        Returns ok, the violations and warnings (rule id, message naming the fields and values,
        fix), the resolved values (data-parallel size, pad_seq_to_mult, token slots per step) and
        the config that was checked. A config that breaks rules is a normal result (ok=false);
        a config that cannot be read (bad YAML, unknown key) is a tool error naming the line.
        """
        from reference_impl.config.validate import validate_config as validate

        given = [n for n, v in (("config_text", config_text), ("path", path), ("example", example)) if v is not None]
        if len(given) > 1:
            raise ToolError(f"give one of config_text, path or example, not {' and '.join(given)}.")
        source: object = None
        if config_text is not None:
            if ":" not in config_text and not config_text.lstrip().startswith("{"):
                raise ToolError(
                    "config_text must be a YAML or JSON mapping, e.g. 'train: {micro_batch_size: 1}'. "
                    "Fix: to validate a file, pass it as path."
                )
            # A trailing newline makes the loader read the string as text, never as a file name.
            source = config_text if config_text.endswith("\n") else config_text + "\n"
        elif path is not None:
            source = roots.resolve(path, field="path", kind="file")
        elif example is not None:
            from reference_impl.examples import example_path

            source = example_path(example)
        with tool_errors():
            return validate(source, list(overrides)).to_dict()  # type: ignore[return-value,arg-type]

    @server.tool(title="Explain a packing rule", annotations=READ_ONLY)
    def explain_rule(
        query: Annotated[str, Field(description="a rule id (e.g. PACK-OFFLINE-MBS1) or keywords (e.g. 'cuda graph')",
                                    min_length=1, max_length=200)],
        limit: Annotated[int, Field(ge=1, le=50, description="most rules returned for a keyword query")]
        = MAX_RULES_RETURNED,
    ) -> ExplainOut:
        """Explain one rule by id, or the rules whose id, title, fields or fix mention all the keywords.

        Each rule comes with its severity, provenance and source, the fix, and an example config
        (dotted overrides) that breaks it plus the overrides that fix it.
        """
        from reference_impl.config.rules import RULES_BY_ID, get_rule, search_rules

        rule = get_rule(query)
        if rule is not None:
            return {"query": query, "matched_by": "id", "total_matches": 1, "rules": [rule.describe()]}  # type: ignore
        found = search_rules(query)
        if not found:
            close = difflib.get_close_matches(query.strip().upper(), list(RULES_BY_ID), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ToolError(
                f"No rule id or keyword match for {query!r}.{hint} Fix: call list_rules to see every rule id."
            )
        return {  # type: ignore[return-value]
            "query": query,
            "matched_by": "keyword",
            "total_matches": len(found),
            "rules": [r.describe() for r in found[:limit]],
        }

    @server.tool(title="List the packing rules", annotations=READ_ONLY)
    def list_rules(
        family: Annotated[FamilyName | None, Field(description="only this rule family")] = None,
        severity: Annotated[Literal["error", "warning"] | None, Field(description="only this severity")] = None,
    ) -> RuleListOut:
        """Every rule of the registry (or one family / severity): id, severity, family, provenance, title.

        Use explain_rule for the fix and an example of a rule.
        """
        from reference_impl.config.rules import RULES

        rules = [
            r for r in RULES
            if (family is None or r.family == family) and (severity is None or r.severity == severity)
        ]
        return {  # type: ignore[return-value]
            "families": dict(FAMILIES),
            "count": len(rules),
            "rules": [
                {"id": r.id, "severity": r.severity, "family": r.family, "provenance": r.provenance, "title": r.title}
                for r in rules
            ],
        }

    @server.tool(title="Check a model family's packing support", annotations=READ_ONLY)
    def check_model_support(
        family: Annotated[str, Field(description="model family id or alias, e.g. qwen3_next, llama3, gemma3_vl",
                                     min_length=1, max_length=100)],
        path: Annotated[PathName | None, Field(description="one packing path; all four when omitted")] = None,
    ) -> ModelSupportOut:
        """Recorded support of a model family for each packing path, from Megatron-Bridge recipes.

        Status: supported, opt_out (a recipe turns the path off), caveat (allowed with a known
        limitation) or unknown (no record: verify with a smoke test before a long run); evidence
        names the recipe or file the record comes from.
        """
        from reference_impl.config.model_support import check_model_support as check

        with tool_errors():
            results = check(family, path)
        return {  # type: ignore[return-value]
            "query": family,
            "known_family": results[0].known_family,
            "results": [r.to_dict() for r in results],
        }
