"""`VerifyConfig`: how responses are graded, the `verify` section of `nemo-lead rl` and `nemo-lead eval`.

    verify.workers      grader processes (on global rank 0)
    verify.timeout_s    soft time limit per answer; a grader stuck past it (plus a grace) is killed
    verify.answer_region where the final answer is read: after_think | before_think | all
                        (`nemo_lead.verify.extract.REGIONS`); None: the command's default (rl: its outcome
                        rule's, `nemo_lead.verify.verifier.default_region`; eval: after_think, the paper's protocol)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nemo_lead.config.fields import setting
from nemo_lead.verify.extract import REGIONS
from nemo_lead.verify.verifier import MathVerifier, default_region


@dataclass
class VerifyConfig:
    workers: int = setting(2, resume="free", results=False)  # grader processes (rank 0); 1 on a 2-core machine
    timeout_s: float = 5.0  # per answer (math-verify's soft limit; the worker is killed at timeout + grace)
    answer_region: Optional[str] = setting(None, choices=(None, *REGIONS))  # after_think | before_think | all; None: the command's default

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"verify.workers must be >= 1, got {self.workers}")
        if not self.timeout_s > 0:
            raise ValueError(f"verify.timeout_s must be > 0, got {self.timeout_s}")
        if self.answer_region is not None and self.answer_region not in REGIONS:
            raise ValueError(f"verify.answer_region must be one of {', '.join(REGIONS)} or null, "
                             f"got {self.answer_region!r}")

    def region(self, default: str) -> str:
        """`answer_region`, or the command's `default` where it is None."""
        return self.answer_region or default

    def verifier(self, rule: str = "paper"):
        """A `MathVerifier` with these settings grading by `rule` (close it, or use it as a context manager);
        the answer is read in `answer_region`, else where the rule reads it (`default_region`)."""
        return MathVerifier(self.workers, self.timeout_s, self.region(default_region(rule)), rule=rule)
