"""`python -m prepare` lists the steps."""

import prepare

print(prepare.__doc__.strip())
