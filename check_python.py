"""The README's set-up starts here: one line and exit status 1 on a Python that ve-fairseq 0.12.3 has no wheels for
(it has them for 3.11 and 3.12 only), before pip would download torch to find out."""

import sys

SUPPORTED = [(3, 11), (3, 12)]  # pyproject.toml's requires-python says the same

if sys.version_info[:2] not in SUPPORTED:
    sys.exit(
        f"vaswani_plugin needs Python 3.11 or 3.12 (ve-fairseq 0.12.3 has wheels for those only); this is "
        f"Python {sys.version.split()[0]}: run the set-up with python3.11 or python3.12"
    )
