"""Offline stand-in for get-pip.py, which ansible-test downloads to bootstrap pip in its sanity venvs.

`make sanity` installs this file as ~/.ansible/test/cache/get_pip_<version>.py, where ansible-test
looks before downloading. Like get-pip.py it installs pip and then the packages it is given, but it
takes pip from the interpreter's bundled wheel (ensurepip) and the rest from the configured index.
"""

import subprocess
import sys

# Options that get-pip.py understands and `pip install` does not.
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main():
    """Bootstrap pip with ensurepip, then pip install the arguments."""
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pip", "install", *args], check=True)
    if "--no-setuptools" in sys.argv[1:]:
        # ensurepip also installs setuptools on Python < 3.12; get-pip.py would not have.
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "setuptools"], check=False)


if __name__ == "__main__":
    main()
