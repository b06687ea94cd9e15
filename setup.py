"""Build hook for the optional C extension; everything else is in pyproject.toml.

`odradek.client._crecords` (the client's record codec) is compiled when a C compiler and
Python headers are present. It is optional: if the build fails, the install still
succeeds and the client uses its pure-Python codec (same results, slower). Set
ODRADEK_PURE_PYTHON=1 to skip the build.
"""

import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("ODRADEK_PURE_PYTHON") != "1":
    ext_modules.append(Extension("odradek.client._crecords", ["src/odradek/client/_crecords.c"], optional=True,
                                 extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]))

setup(ext_modules=ext_modules)
