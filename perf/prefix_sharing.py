"""Prefix sharing for minimal-pair scoring, measured: the scoring engine with each shared prefix fed once, side by
side with the project's engine (`wneurons.lm.scoring`), on the same sentences, model and threads.

    OMP_NUM_THREADS=2 python perf/prefix_sharing.py --model-dir resources/models/smollm2-135m --n-pairs 20 --threads 2

Not part of the library, because it does not pay on a CPU (docs/performance.md, issue 14): it feeds ~1.3x fewer
positions of BLiMP, but its two forwards per batch (prefixes, then the endings on their key/value cache) are padded
separately, to the longest prefix and to the longest ending of groups chosen by their prefix, and that padding eats
the saving. It prints the positions each engine feeds (real and padded; also, from batch shapes alone, those of a
padding-aware variant: groups of at most two sentences batched by prefix and length), both times and the largest
difference in a sentence's log-prob. ``tests/test_perf_scripts.py`` checks that it computes the same log-probs as
the project's engine on a tiny model of every supported family, so its timing measures the approach, not a bug.
"""

from __future__ import annotations

import argparse
import inspect
import os
import time
from pathlib import Path

import numpy as np
import torch

from wneurons.lm.scoring import batched_logprob_sums, model_device, padded_rows, target_logprobs, tokenize

# Sequences that share at least this many leading tokens (the context token included) are scored from one prefix.
_MIN_SHARED_PREFIX = 2


def prefix_groups(flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups of sequences that share a leading prefix, so the prefix is fed once (:func:`shared_prefix_sums`).

    Sequences are sorted lexicographically, so those sharing a prefix are neighbours; a run of neighbours becomes
    one group while that does not lower the positions it saves, ``(members - 1) * prefix``. Every member keeps at
    least one token after the prefix. Returns ``(members, group_starts, prefix_lengths)``: sequence indices in
    group order, CSR starts of each group in ``members`` (``n_groups + 1``) and each group's prefix length; a
    sequence alone is a group whose prefix is all of it but its last token.
    """
    lengths = offsets[1:] - offsets[:-1]
    n = len(lengths)
    width = int(lengths.max())
    dense = np.full((n, width), -1, dtype=np.int64)  # -1 never equals a token id
    cols = np.arange(width)
    inside = cols[None, :] < lengths[:, None]
    dense[inside] = flat
    order = np.lexsort(dense.T[::-1])  # lexicographic by row, first column most significant
    dense = dense[order]
    # Common prefix of each sorted sequence with the one before it.
    differ = dense[1:] != dense[:-1]
    lcp = np.where(differ.any(axis=1), differ.argmax(axis=1), width)
    sorted_len = lengths[order]
    starts, prefixes = [0], []
    prefix, members = int(sorted_len[0]) - 1, 1
    for k in range(1, n):
        shared = min(prefix, int(lcp[k - 1]), int(sorted_len[k]) - 1)
        if shared >= _MIN_SHARED_PREFIX and members * shared >= (members - 1) * prefix:
            prefix, members = shared, members + 1
        else:
            prefixes.append(prefix)
            starts.append(k)
            prefix, members = int(sorted_len[k]) - 1, 1
    prefixes.append(prefix)
    starts.append(n)
    return order, np.asarray(starts, dtype=np.int64), np.asarray(prefixes, dtype=np.int64)


def chunks(sizes: np.ndarray, batch_size: int) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` slices of groups holding at most ``batch_size`` sequences (a larger group alone)."""
    out, lo = [], 0
    while lo < len(sizes):
        hi, rows = lo + 1, int(sizes[lo])
        while hi < len(sizes) and rows + sizes[hi] <= batch_size:
            rows += int(sizes[hi])
            hi += 1
        out.append((lo, hi))
        lo = hi
    return out


def cache_argument(model) -> str:
    """The forward's key/value-cache argument: ``cache`` since transformers 5.24 (``past_key_values`` before; the
    old name warns there and goes in 5.40)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def shared_prefix_sums(
    model,
    flat: np.ndarray,
    offsets: np.ndarray,
    *,
    batch_size: int,
    fed: list[int] | None = None,
) -> np.ndarray:
    """Same as :func:`wneurons.lm.scoring.batched_logprob_sums`, feeding a prefix shared by several sequences once.

    Minimal pairs mostly differ near their end (BLiMP's two sentences share 3.7 of 9.9 tokens), so each group of
    :func:`prefix_groups` is scored in two forwards: its prefix, whose key/value cache and log-probs serve every
    member, then the members' own endings on that cache (explicit positions, the unused cache slots of shorter
    prefixes masked out). The log-prob of a member's first own token comes from the prefix's last position.
    """
    n = len(offsets) - 1
    lengths = offsets[1:] - offsets[:-1]
    sums = np.zeros(n, dtype=np.float64)
    members, group_starts, prefixes = prefix_groups(flat, offsets)
    group_sizes = np.diff(group_starts)
    # Longest prefix first (memory peak at once, neighbours of similar length); groups chunked to about batch_size
    # sequences per forward.
    group_order = np.argsort(-prefixes, kind="stable")
    device = model_device(model)
    cache_name = cache_argument(model)
    with torch.inference_mode():
        for lo, hi in chunks(group_sizes[group_order], batch_size):
            groups = group_order[lo:hi]
            prefix = prefixes[groups]
            # The prefix forward: positions 0 .. prefix-1 of the group's first member.
            ids_t = torch.from_numpy(padded_rows(flat, offsets[members[group_starts[groups]]], prefix)).to(device)
            width = ids_t.shape[1]
            prefix_valid = torch.from_numpy(np.arange(width)[None, :] < prefix[:, None]).to(device)
            member_idx = np.concatenate([members[group_starts[g] : group_starts[g + 1]] for g in groups])
            member_group = np.repeat(np.arange(len(groups)), group_sizes[groups])
            has_suffix = lengths[member_idx] - 1 > prefix[member_group]
            if fed is not None:
                fed.append(ids_t.numel())
            out = model(input_ids=ids_t, attention_mask=prefix_valid.long(), use_cache=bool(has_suffix.any()))
            logits = out.logits
            # Tokens 1 .. prefix-1: shared by every member of the group.
            shared = target_logprobs(logits[:, :-1], ids_t[:, 1:]).double()
            shared = shared.masked_fill(~prefix_valid[:, 1:], 0.0).sum(dim=1).cpu().numpy()
            # Each member's token at position `prefix`, predicted by the prefix's last position.
            last = torch.from_numpy(prefix - 1).to(device)
            member_group_t = torch.from_numpy(member_group).to(device)
            next_token = torch.from_numpy(flat[offsets[member_idx] + prefix[member_group]]).to(device)
            last_logits = logits[member_group_t, last[member_group_t]]
            first_own = target_logprobs(last_logits[:, None, :], next_token[:, None])[:, 0].double().cpu().numpy()
            totals = shared[member_group] + first_own
            if has_suffix.any():
                # Members' own endings: tokens prefix .. L-2 fed after the group's cache, predicting prefix+1 .. L-1.
                rows_s = np.flatnonzero(has_suffix)
                seq, grp = member_idx[rows_s], member_group[rows_s]
                start = prefix[grp]
                suffix_len = lengths[seq] - start  # tokens from `prefix` to the end; the last one is not fed
                s_ids_t = torch.from_numpy(padded_rows(flat, offsets[seq] + start, suffix_len)).to(device)
                s_cols = np.arange(s_ids_t.shape[1])
                s_valid = torch.from_numpy(s_cols[None, 1:] < suffix_len[:, None]).to(device)
                grp_t = torch.from_numpy(grp).to(device)
                cache = getattr(out, cache_name)
                cache.reorder_cache(grp_t)
                mask = torch.cat([prefix_valid[grp_t], s_valid], dim=1)
                positions = torch.from_numpy(start[:, None] + s_cols[None, :-1]).to(device)
                if fed is not None:
                    fed.append(s_ids_t[:, :-1].numel())
                s_logits = model(
                    input_ids=s_ids_t[:, :-1],
                    attention_mask=mask.long(),
                    position_ids=positions,
                    use_cache=False,
                    **{cache_name: cache},
                ).logits
                own = target_logprobs(s_logits, s_ids_t[:, 1:]).double().masked_fill(~s_valid, 0.0).sum(dim=1)
                totals[rows_s] += own.cpu().numpy()
            sums[member_idx] = totals
    return sums


def plain_positions(offsets: np.ndarray, batch_size: int) -> int:
    """Positions the project's engine feeds, padding included (length-sorted batches, the last token not fed)."""
    lengths = offsets[1:] - offsets[:-1]
    order = np.argsort(-lengths, kind="stable")
    batches = np.array_split(order, range(batch_size, len(order), batch_size))
    return int(sum(len(rows) * (lengths[rows].max() - 1) for rows in batches))


def capped_positions(flat: np.ndarray, offsets: np.ndarray, batch_size: int, cap: int = 2) -> int:
    """Positions (padding included) of a padding-aware variant, from batch shapes alone (no model): groups of at
    most ``cap`` sentences, batched by prefix length then longest sentence, prefixes and endings padded apart."""
    lengths = offsets[1:] - offsets[:-1]
    members, starts, prefixes = prefix_groups(flat, offsets)
    groups = []  # (member indices, prefix length)
    for g, prefix in enumerate(prefixes):
        group = members[starts[g] : starts[g + 1]]
        for part in np.array_split(group, range(cap, len(group), cap)):
            groups.append((part, int(prefix) if len(part) > 1 else int(lengths[part[0]]) - 1))
    groups.sort(key=lambda item: (-item[1], -int(lengths[item[0]].max())))  # the better of the orders tried
    total = 0
    for lo, hi in chunks(np.array([len(part) for part, _ in groups]), batch_size):
        batch = groups[lo:hi]
        total += len(batch) * max(prefix for _, prefix in batch)
        endings = np.concatenate([lengths[part] - 1 - prefix for part, prefix in batch])
        endings = endings[endings > 0]
        total += len(endings) * int(endings.max()) if endings.size else 0
    return total


def main() -> None:
    from wneurons.lm.models import load_model
    from wneurons.store.data import load_blimp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default="resources/models/smollm2-135m")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data")) / "blimp" / "data",
    )
    parser.add_argument("--n-pairs", type=int, default=30, help="first N pairs of every paradigm")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(local_path=args.model_dir, dtype="float32")
    pairs = load_blimp(args.data_dir).group_by("paradigm", maintain_order=True).head(args.n_pairs)
    texts = list(dict.fromkeys(pairs["sentence_good"].to_list() + pairs["sentence_bad"].to_list()))
    flat, offsets, _ = tokenize(tokenizer, texts, "harness")
    members, starts, prefixes = prefix_groups(flat, offsets)
    useful_plain = int((offsets[1:] - offsets[:-1] - 1).sum())
    print(
        f"{pairs.height} pairs, {len(texts)} distinct sentences, {len(prefixes)} prefix groups "
        f"({int((np.diff(starts) > 1).sum())} with more than one sentence); {torch.get_num_threads()} threads"
    )
    fed: list[int] = []
    start = time.perf_counter()
    plain = batched_logprob_sums(model, flat, offsets, batch_size=args.batch_size, progress=None)
    plain_s = time.perf_counter() - start
    start = time.perf_counter()
    shared = shared_prefix_sums(model, flat, offsets, batch_size=args.batch_size, fed=fed)
    shared_s = time.perf_counter() - start
    lengths = offsets[1:] - offsets[:-1]
    group_of = np.repeat(np.arange(len(prefixes)), np.diff(starts))
    useful_shared = int(prefixes.sum() + np.maximum(lengths[members] - 1 - prefixes[group_of], 0).sum())
    padded_plain = plain_positions(offsets, args.batch_size)
    print(f"project engine : {useful_plain:,} positions ({padded_plain:,} with padding), {plain_s:.1f} s")
    print(f"prefix sharing : {useful_shared:,} positions ({sum(fed):,} with padding), {shared_s:.1f} s")
    capped = capped_positions(flat, offsets, args.batch_size)
    print(f"groups of <= 2, batched by length (batch shapes only, not run): {capped:,} positions with padding")
    print(
        f"positions {useful_plain / useful_shared:.2f}x fewer, with padding {padded_plain / sum(fed):.2f}x; time ratio"
        f" (project / sharing) {plain_s / shared_s:.2f}; max |dlogp| {np.abs(plain - shared).max():.2e}"
    )


if __name__ == "__main__":
    main()
