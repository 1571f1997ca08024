"""The code generator's error: a kernel it cannot produce or assemble."""


class CodegenError(RuntimeError):
    """The code generator cannot produce (or assemble) a kernel for this problem/schedule."""
