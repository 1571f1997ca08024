"""Nova's compiler: ``nova.compile`` (frontend -> passes -> program), the step cache and the
executor (``nova.compiler.executor``: one launch per kernel group over one arena, CUDA-graph
replay on the GPU)."""
