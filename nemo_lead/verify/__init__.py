"""Answer verification: extraction, math-verify grading in worker processes, repetition, voting keys.

    from nemo_lead.verify import MathVerifier, Grade, extract_answer, canonical_answer, find_repetition

Modules, one job each: `extract` (where the final answer is), `notation` (how an answer's notation is read:
separators, mixed numbers, constants, units), `canonical` (voting keys), `repetition`
(the stage-2 penalty's detector), `match` (is an answer equal to the gold; runs in workers), `pool`
(worker processes with hard deadlines), `verifier` (`MathVerifier`, `Grade`).

Importing this package is cheap: it imports neither math-verify (only the workers do) nor torch (`Outcome`
is imported when the first grades are built).
"""

from nemo_lead.verify.canonical import canonical_answer
from nemo_lead.verify.config import VerifyConfig
from nemo_lead.verify.extract import extract_answer
from nemo_lead.verify.repetition import find_repetition
from nemo_lead.verify.verifier import Grade, MathVerifier, default_region

__all__ = ["Grade", "MathVerifier", "VerifyConfig", "canonical_answer", "default_region", "extract_answer",
           "find_repetition"]
