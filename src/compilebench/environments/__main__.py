"""`python -m compilebench.environments`: build, list or remove the environments' venvs (venvs.py)."""

from compilebench.environments.venvs import main

main()
