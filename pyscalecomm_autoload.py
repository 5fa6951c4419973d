"""Makes ``dist.init_process_group("scalecomm")`` work without ``import pyscalecomm``.

torch calls :func:`register` (the ``torch.backends`` entry point this package
installs) near the end of ``import torch``, after torch.distributed has
loaded; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off. It only names the
backend: pyscalecomm and its extension load when the first scalecomm group is
created, so ``import torch`` stays as fast as it was for everyone else. It
lives outside the package because importing ``pyscalecomm.<anything>`` would
import pyscalecomm (and its extension) in the middle of torch's own import.
"""


def _create(dist_opts, pg_options):
    import pyscalecomm  # noqa: F401  (the real registration: exit handler, launcher variables)
    from pyscalecomm._registration import _create_backend

    return _create_backend(dist_opts, pg_options)


def register() -> None:
    """Registers "scalecomm" with torch.distributed; never raises (a failure
    here would fail ``import torch`` itself)."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or "SCALECOMM" in dist.Backend._plugins:
            return
        dist.Backend.register_backend("scalecomm", _create, extended_api=True, devices=["cpu", "cuda"])
    except Exception:  # noqa: BLE001 - without the backend, `import pyscalecomm` still registers it
        return
