"""The environments' wing: the software stacks a comparison measures, built from their names into venvs. What an
environment pins over the project's own and the key a built one is known by (`pins`), the package index asked before
anything is built (`package_index`), the venvs built, found, listed and removed (`venvs`: `python -m
compilebench.environments`), and the installs themselves, uv where it can (`installer`: standard library only, `make`
runs it by path before anything else is installed). What a `torch-X.Y.Z` name in `compare` means (its companions) is
the config's to say: config/releases.py."""
