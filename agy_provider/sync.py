"""`agy_provider.sync`: the documented import path of `agy_provider.hosts.sync` (the code lives there).

Kept so `import agy_provider.sync` and `from agy_provider.sync import …` work as documented.
"""

from agy_provider.hosts.sync import *  # noqa: F403
from agy_provider.hosts.sync import __all__ as __all__
