"""The paper's quantitative claims (``docs/analyses.md`` section F, C1-C30) checked against result files.

- :mod:`.run`: the :class:`Run` reader (a run's models, files and config facts), :class:`Outcome`, the verdicts
  and the rules several checks share (CI verdicts, correlations, "not enough data at n = …");
- the checks by paper section: :mod:`.representation` (§1-2: C1, C2), :mod:`.dynamics` (training: C3-C5,
  C21, C22), :mod:`.perturbation` (§3: C6-C13), :mod:`.groups` (§4: C14-C17), :mod:`.pairs` (§5-7: C18-C20,
  C23-C25), :mod:`.facts` (the run as a whole: C26-C29);
- :mod:`.table`: :data:`CLAIMS` and :func:`claim_rows`, one row per claim and model.

Verdicts: holds / does not hold / not enough data / not run. Where the paper is qualitative the pass rule is the
spec's operationalization or a stricter reading documented beside the claim; where a CI is available a claim holds
only when the CI excludes the null in the claimed direction, and does not hold when it excludes it in the other
direction; a CI that covers the null, or units too few for a CI, is "not enough data".
"""

from wneurons.report.claims.run import FAILS, HOLDS, NO_DATA, NOT_RUN, VERDICTS, NotRun, Outcome, Run
from wneurons.report.claims.table import CLAIMS, Claim, claim_rows

__all__ = ["CLAIMS", "FAILS", "HOLDS", "NOT_RUN", "NO_DATA", "VERDICTS", "Claim", "NotRun", "Outcome", "Run",
           "claim_rows"]  # fmt: skip
