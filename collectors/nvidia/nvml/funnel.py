"""The one place NVML errors are mapped to outcomes; every NVML call of the collector goes
through ``Funnel.call`` (or ``Funnel.outcome`` for a per-entry field-value return code).

Three outcomes:
- ``unsupported``: NVML_ERROR_NOT_SUPPORTED, and NVML_ERROR_FUNCTION_NOT_FOUND (the driver's
  libnvidia-ml lacks the symbol: pynvml raises it for every call an older library does not
  export), pynvml's NVMLLibraryMismatchError and NVML_ERROR_ARGUMENT_VERSION_MISMATCH (a struct
  version the driver does not know). The value is absent with status ``unsupported``; the
  last three are also ``missing`` (an older API: the caller may try an older variant);
- ``lost``: NVML_ERROR_GPU_IS_LOST, and NVML_ERROR_UNKNOWN on a GPU already seen lost (after
  a GPU fell off the bus the driver answers either): the GPU is reported failed;
- ``error``: any other NVML error (timeouts, no permission, not found...): the value is absent
  with status ``error``; ``Got.code`` keeps the NVML return code for callers that must tell
  NOT_FOUND (empty MIG slot, no new samples) or TIMEOUT (event wait) apart.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

UNSUPPORTED, LOST, ERROR, OK = "unsupported", "lost", "error", "ok"

# NVML return codes (nvml.h nvmlReturn_t); read from the binding when it has them
_CODES = {"SUCCESS": 0, "ERROR_INVALID_ARGUMENT": 2, "ERROR_NOT_SUPPORTED": 3, "ERROR_NOT_FOUND": 6,
          "ERROR_TIMEOUT": 10, "ERROR_FUNCTION_NOT_FOUND": 13, "ERROR_GPU_IS_LOST": 15,
          "ERROR_ARGUMENT_VERSION_MISMATCH": 25, "ERROR_UNKNOWN": 999}


class Lost(Exception):
    """An NVML call said the GPU is lost: it ends that GPU's read for this cycle."""


class Failed(Exception):
    """A call the read cannot do without failed (unsupported or error): ``got`` says how."""

    def __init__(self, got: "Got"):
        super().__init__(f"{type(got.error).__name__}: {got.error}" if got.error is not None else got.status)
        self.got = got


class Got:
    """The result of one call: ``value`` when ``status`` is ``ok``, else the outcome
    (``unsupported`` / ``error``), the NVML ``code`` and whether the function is ``missing``."""

    __slots__ = ("value", "status", "code", "missing", "error")

    def __init__(self, value: Any, status: str = OK, code: Optional[int] = None, missing: bool = False,
                 error: Optional[BaseException] = None):
        self.value, self.status, self.code, self.missing, self.error = value, status, code, missing, error

    @property
    def ok(self) -> bool:
        return self.status == OK


class Funnel:
    """Calls NVML functions of one binding (pynvml or the fake) and classifies failures.

    ``after_loss``: the GPU being read was lost before, so NVML_ERROR_UNKNOWN counts as lost
    too (set by the collector before each GPU's read)."""

    def __init__(self, nv: Any):
        self.nv = nv
        self.error_class = nv.NVMLError
        c = {k: int(getattr(nv, f"NVML_{k}", v)) for k, v in _CODES.items()}
        self.SUCCESS, self.NOT_FOUND, self.TIMEOUT = c["SUCCESS"], c["ERROR_NOT_FOUND"], c["ERROR_TIMEOUT"]
        self.INVALID_ARGUMENT = c["ERROR_INVALID_ARGUMENT"]
        self._lost_code, self._unknown = c["ERROR_GPU_IS_LOST"], c["ERROR_UNKNOWN"]
        self._unsupported = {c["ERROR_NOT_SUPPORTED"]}
        self._missing_codes = {c["ERROR_FUNCTION_NOT_FOUND"], c["ERROR_ARGUMENT_VERSION_MISMATCH"]}
        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        # no symbol at all (a binding older than the call), or the unversioned wrapper of a
        # newer struct on an older driver (pynvml raises NVMLLibraryMismatchError)
        self._missing_types: tuple = (AttributeError,) + ((mismatch,) if isinstance(mismatch, type) else ())
        self.after_loss = False

    # ------------------------------------------------------------------ classification
    def outcome(self, code: Optional[int], *, invalid_is_unsupported: bool = False) -> str:
        """Outcome of an NVML return code (None: not an NVML error)."""
        if code == self.SUCCESS:
            return OK
        if code == self._lost_code or (code == self._unknown and self.after_loss):
            return LOST
        if code in self._unsupported or code in self._missing_codes:
            return UNSUPPORTED
        if invalid_is_unsupported and code == self.INVALID_ARGUMENT:
            return UNSUPPORTED  # per-entry field values: a field id this driver does not know
        return ERROR

    def classify(self, e: BaseException) -> Got:
        """An exception raised by an NVML call -> Got (never raises)."""
        if isinstance(e, self._missing_types):
            return Got(None, UNSUPPORTED, None, True, e)
        if not isinstance(e, self.error_class):
            return Got(None, ERROR, None, False, e)
        code = getattr(e, "value", None)
        return Got(None, self.outcome(code), code, code in self._missing_codes, e)

    # ------------------------------------------------------------------ calls
    def call(self, fn: Callable[..., Any], *args: Any) -> Got:
        """``fn(*args)`` -> Got; a lost GPU raises Lost. Exceptions other than NVML's (and
        a missing function) propagate: they are bugs, not device states."""
        try:
            return Got(fn(*args))
        except Exception as e:  # noqa: BLE001 - classified below, unknown kinds re-raised
            if not isinstance(e, self.error_class) and not isinstance(e, self._missing_types):
                raise
            got = self.classify(e)
        if got.status == LOST:
            raise Lost(got.error) from None
        return got

    def attempt(self, fn: Callable[..., Any], *args: Any) -> Got:
        """Like ``call`` but a lost GPU is a Got with status ``lost`` (event thread, setup)."""
        try:
            return self.call(fn, *args)
        except Lost as e:
            return Got(None, LOST, self._lost_code, False, e.args[0] if e.args else None)

    def need(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The result; Failed when the call did not succeed (Lost when the GPU is lost)."""
        return self.unwrap(self.call(fn, *args))

    @staticmethod
    def unwrap(got: Got) -> Any:
        """``got.value``; Failed when the call did not succeed."""
        if not got.ok:
            raise Failed(got)
        return got.value

    def value(self, fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
        """The result, or ``default`` when unsupported or an error (Lost still raises)."""
        got = self.call(fn, *args)
        return got.value if got.ok else default

    def optional(self, name: str, *args: Any, default: Any = None) -> Any:
        """A function the binding may not have at all (``name``), else like ``value``;
        lost is ``default`` too (identity extras, system-wide calls)."""
        fn = getattr(self.nv, name, None)
        if fn is None:
            return default
        got = self.attempt(fn, *args)
        return got.value if got.ok else default


def cuda_version_text(v: Any) -> Optional[str]:
    """nvmlSystemGetCudaDriverVersion's int (CUDA_VERSION style, 12080) -> ``12.8``; None for
    anything that is not a positive version number."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    if n <= 0:
        return None
    return f"{n // 1000}.{(n % 1000) // 10}"


def cuda_driver_version(f: Funnel) -> Optional[str]:
    """The CUDA driver API version the installed driver supports (``12.8``): from
    nvmlSystemGetCudaDriverVersion_v2, else nvmlSystemGetCudaDriverVersion (older libraries)."""
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        text = cuda_version_text(f.optional(name))
        if text is not None:
            return text
    return None
