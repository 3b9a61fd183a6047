"""The environments' wing: the software stacks a comparison measures, from their names to built venvs. What an
environment pins over the project's own and the key a built one is known by (`pins`), the torch releases a user names
without defining them and the companions each needs (`releases`), the package index asked before anything is built
(`package_index`), the venvs built, found, listed and removed (`venvs`: `python -m compilebench.environments`), and
the installs themselves, uv where it can (`installer`: standard library only, `make` runs it by path before anything
else is installed). Imports nothing here, so `config` may read `releases` without building anything."""
