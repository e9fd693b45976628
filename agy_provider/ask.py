"""`agy_provider.ask`: the documented import path of `agy_provider.hosts.ask` (the code lives there).

Kept so `import agy_provider.ask` and `from agy_provider.ask import …` work as documented.
"""

from agy_provider.hosts.ask import *  # noqa: F403
from agy_provider.hosts.ask import __all__ as __all__
