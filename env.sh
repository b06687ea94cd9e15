export PYTHONPATH=/work/wt/request-cost4/src
export PATH=/work/main/.venv/bin:$PATH
export ODRADEK_SKIP_INSTALL=1
