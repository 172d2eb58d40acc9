"""The course's exercises: a registry, and checkers that test a learner's code the moment it runs.

`check("04.attention", my_attention)` runs the learner's function against bertlib's reference on
seeded random cases, edge cases (padding, a fully padded row, length 1, float16, unicode) and the
inputs that expose the classic mistakes, and returns a `Result`: `.passed`, `.message`. A failure
names the first failing case, what was expected against what came back (shape, dtype, the first
differing position and values) and, where the wrong answer matches a catalogued mistake, that
mistake by name. In a notebook `check` never raises; `strict=True` raises AssertionError instead
(the solutions and the tests use it). `list()` shows every exercise with the signature it expects.

"Not attempted" is said only of the untouched starter (its body, docstring aside, is `raise
NotImplementedError`, `...` or `pass`), read from the function's source; any other function that returns
None or raises is told what happened, at the line of the learner's own code. Each call of the learner's
code has a time limit (`CALL_TIME_LIMIT_S`) where the platform has SIGALRM, so an endless loop ends in a
verdict, not a hung cell. Code that runs the piece's own implementation (each exercise names them,
`Exercise.implemented_by`: bertlib's, and the library's where the exercise is to write what torch, transformers,
scikit-learn or scipy has) or bertlib's reference answer is refused with a verdict that names it: read from the
code before it runs (`borrowed`), and watched while it runs (`borrowing.Watch`), however it was reached. What
`use` handed in for another exercise is never held against the learner.

`use("04.attention", fn)` is how later cells run the learner's code: `fn` when it passes, else bertlib's
reference (from `references`), with one line saying which and why. `your_bert` assembles the learner's
pieces into a whole BERT (`assemble_bert`) and keeps them for later notebooks (`keep`, `kept`).

Each notebook's checkers live in their own module (`nb03` for notebook 03 ...), found and imported
the first time the registry is read. The registry and the tools a checker needs (`Fail`, `expect_close`,
`expect_equal`, `diagnose`, `Mistakes`) are in `checking`; everything public loads on first use.

Leaves out: grading, scores, hidden tests. A check is feedback for the learner, nothing more.
"""

from bertlib.basics import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "checking": ("Checker", "Fail", "Exercise", "Result", "exercise", "get", "list", "CALL_TIME_LIMIT_S",
                 "ReturnedNone", "TimedOut", "Borrowed", "borrowed", "definition", "is_starter", "learner_frame",
                 "check", "use", "call",
                 "describe", "expect_close", "expect_equal", "Mistakes", "diagnose", "as_int", "tensor_of_shape"),
    "your_bert": ("assemble_bert", "keep", "kept", "YourBertModel", "YourMasking", "YourPretraining", "save_your_bert",
                  "your_bert_classifier"),
})
