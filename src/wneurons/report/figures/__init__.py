"""The paper's figures, drawn from result tables, aggregated results and activation shards: one module per part
of the paper (``neurons``: Fig. 1, 2a; ``ablations``: Fig. 3, 4; ``analyses``: Fig. 3d, 5, 6a, 7; ``training``:
Fig. 2b-d, 6b, 6c-d), their shared colours and the atomic PNG writer in ``style``. The table of figures (what each
reads, its caption) is :data:`wneurons.jobs.figures.FIGURES`.

Figures are built on :class:`matplotlib.figure.Figure` directly (Agg canvas, no pyplot state shared between
calls) and saved atomically as PNG. Layers are 0-based in arguments and labelled 1-based ("MLP block L+1"), as
in the paper. Drawing functions take frames and dicts, never paths to results.
"""
