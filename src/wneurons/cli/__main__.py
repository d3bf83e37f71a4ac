"""``python -m wneurons.cli``: the ``wneurons`` command (:func:`wneurons.cli.main`)."""

import sys

from wneurons.cli import main

sys.exit(main())
