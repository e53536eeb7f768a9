"""``python -m dualtape``: the ``dualtape`` command (``info``, ``bench``, ``train-text``,
``sample``) for an interpreter whose scripts folder is not on ``PATH``."""

import sys

from .cli import main

sys.exit(main())
