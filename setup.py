"""Only the optional C extensions live here; everything else is in pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds and kvscope runs its
pure-Python lanes (same results, slower on big journals and large fleets).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("kvscope._bulk", ["src/kvscope/_bulk.c"], optional=True, extra_compile_args=["-O2"]),
    Extension("kvscope.fleet._grid", ["src/kvscope/fleet/_grid.c"], optional=True, extra_compile_args=["-O2"]),
])
