"""Which revisions collect their activation shards in node-local scratch (``neurons.scratch_dir``).

A revision's shards are read by its statistics, and for a few revisions by later jobs too: Figure 1 and Figure 5's
histogram (the kept shards), the pair sample when ``pairs.source`` is ``test_shards``, the explorer. Those later
jobs run elsewhere, after the allocation, so those revisions' shards must be on the shared file system
(``neurons.activations_dir``). Every other revision's shards live exactly as long as its statistics: with a scratch
directory configured, and collection and statistics planned into one allocation, one job (neuron_stats) collects
them into scratch and reduces them, and the shared file system never sees them. docs/design.md says why one job.
"""

from __future__ import annotations

from wneurons.experiment import targets


def shards_read_later(config: dict) -> set[tuple[str, str]]:
    """(model, revision) pairs whose shards a job other than the statistics reads: the final revisions of Figure 1's
    models, of the analyses' models (Figure 5's histogram reads the kept shards) and of the explorers' models; with
    ``pairs.source: test_shards``, every revision a pair sample is drawn at (the explorer's sign cases read the
    explorer's revision). Listing one too many costs only its
    shards on the shared file system; one too few, a second collection (the DAG still asks for its shards)."""
    finals = [*targets.figure1_models(config), *targets.analysis_models(config), *targets.explorer_models(config)]
    read = {(m, targets.final_revision(config, m)) for m in finals if m in config["models"]}
    if config["pairs"]["source"] == "test_shards":
        read |= {(m, r) for m in targets.pair_models(config) for r in targets.revisions(config, m)}
    return read


def collects_in_scratch(config: dict, model: str, revision: str, one_allocation: bool) -> bool:
    """Whether the statistics of ``(model, revision)`` collect their own shards in scratch: ``neurons.scratch_dir``
    is set, shards are not all kept (``neurons.keep_shards``), no later job reads this revision's, and its
    collection and statistics run in one allocation (``one_allocation``: the planner put them in the same one; a
    merged job must fit where both fit)."""
    neurons = config["neurons"]
    if not neurons.get("scratch_dir") or neurons["keep_shards"] or not one_allocation:
        return False
    return (model, revision) not in shards_read_later(config)
