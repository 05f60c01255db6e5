"""Everything about the package is in pyproject.toml; this file only makes an editable install
(`pip install -e .`) install the `data-files` too, as a regular one does: they are the JupyterLab
extension, which JupyterLab finds only in share/jupyter/labextensions.

setuptools' editable build installs `data_files` only when the distribution answers `has_data()`,
which only the `install` command defines (the distribution has `has_data_files()`), so it
silently leaves them out.
"""

from setuptools import setup
from setuptools.dist import Distribution


class _Distribution(Distribution):
    def has_data(self) -> bool:
        return self.has_data_files()


setup(distclass=_Distribution)
