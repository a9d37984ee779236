# SPDX-License-Identifier: Apache-2.0
# sitecustomize.py — test-only stand-ins for the few APIs FLARE (../shared/flare/<version>) uses
# that Debian bookworm's python3-cryptography 38 and python3-aiohttp 3.8 lack. Loaded only by
# tests/e2e/test_site.sh (this folder first on PYTHONPATH); FLARE's own files stay untouched.
# What it replaces (each only when the real module lacks it):
#   cryptography.x509.verification (PolicyBuilder, Store, ExtensionPolicy: cryptography >= 43),
#     imported by nvflare.lighter.utils at module load: a chain check by issuer name, signature
#     and validity time against the pinned root, without the webpki extension policies;
#   cryptography.x509.load_pem_x509_certificates (>= 39): every PEM block, in order;
#   Certificate.not_valid_before_utc / not_valid_after_utc (>= 42): the naive UTC times made aware;
#   aiohttp.web.WebSocketResponse.get_extra_info (aiohttp >= 3.9): the request transport's.
# pyhocon (not packaged for Debian) is stood in by fallback/pyhocon, which this file puts last on
# sys.path: an installed pyhocon comes first.
# And no process of the test writes bytecode into FLARE's tree (read-only in CI), whatever
# environment it was started with (a trainer started by cjrelayd gets no PYTHONDONTWRITEBYTECODE).
import datetime
import os
import re
import sys
import types


def _patch_cryptography():
    try:
        from cryptography import x509
        from cryptography.hazmat.bindings._rust import x509 as rust_x509
    except ImportError:
        return

    if not hasattr(x509, "load_pem_x509_certificates"):
        pem = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)

        def load_pem_x509_certificates(data):
            certs = [x509.load_pem_x509_certificate(m.group(0)) for m in pem.finditer(data)]
            if not certs:
                raise ValueError("Unable to load PEM file. No X.509 certificate found.")
            return certs

        x509.load_pem_x509_certificates = load_pem_x509_certificates

    for cls in {rust_x509.Certificate, x509.Certificate}:
        for name in ("not_valid_before", "not_valid_after"):
            if not hasattr(cls, name + "_utc"):
                setattr(cls, name + "_utc", property(
                    lambda c, n=name: getattr(c, n).replace(tzinfo=datetime.timezone.utc)))

    try:
        import cryptography.x509.verification  # noqa: F401  (the real one: nothing to stand in)
        return
    except ImportError:
        pass

    class VerificationError(Exception):
        pass

    class Store:
        def __init__(self, certs):
            if not certs:
                raise ValueError("can't create an empty store")
            self.certs = list(certs)

    class ExtensionPolicy:
        @staticmethod
        def webpki_defaults_ca():
            return ExtensionPolicy()

        @staticmethod
        def webpki_defaults_ee():
            return ExtensionPolicy()

        @staticmethod
        def permit_all():
            return ExtensionPolicy()

    def _signed_by(cert, issuer):
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        key = issuer.public_key()
        try:
            if isinstance(key, rsa.RSAPublicKey):
                key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                           cert.signature_hash_algorithm)
            elif isinstance(key, ec.EllipticCurvePublicKey):
                key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
            else:
                key.verify(cert.signature, cert.tbs_certificate_bytes)
        except Exception:
            return False
        return cert.issuer == issuer.subject

    class _Verifier:
        def __init__(self, store, when):
            self.store, self.when = store, when

        def verify(self, leaf, intermediates):
            when = self.when or datetime.datetime.now(datetime.timezone.utc)
            chain, cert = [leaf], leaf
            for _ in range(8):
                if not (cert.not_valid_before_utc <= when <= cert.not_valid_after_utc):
                    raise VerificationError("cert is not valid at validation time")
                for root in self.store.certs:
                    if _signed_by(cert, root):
                        return chain + [root]
                nxt = [i for i in intermediates if i not in chain and _signed_by(cert, i)]
                if not nxt:
                    raise VerificationError("candidates exhausted: no issuer in the store or the intermediates")
                cert = nxt[0]
                chain.append(cert)
            raise VerificationError("chain too long")

    class PolicyBuilder:
        def __init__(self, store=None, when=None):
            self._store, self._when = store, when

        def store(self, store):
            return PolicyBuilder(store, self._when)

        def time(self, when):
            return PolicyBuilder(self._store, when)

        def max_chain_depth(self, depth):
            return self

        def extension_policies(self, ca_policy=None, ee_policy=None):
            return self

        def build_client_verifier(self):
            if self._store is None:
                raise ValueError("a client verifier must have a trust store")
            return _Verifier(self._store, self._when)

        build_server_verifier = lambda self, subject=None: self.build_client_verifier()  # noqa: E731

    mod = types.ModuleType("cryptography.x509.verification")
    mod.__doc__ = "test stand-in (tests/site/shim/sitecustomize.py) for cryptography >= 43's module"
    for obj in (Store, ExtensionPolicy, PolicyBuilder, VerificationError):
        setattr(mod, obj.__name__, obj)
    sys.modules[mod.__name__] = mod
    x509.verification = mod


def _patch_aiohttp():
    # the module is imported only when FLARE loads its http driver: patch it on first import
    try:
        from aiohttp import web_ws
    except ImportError:
        return
    if not hasattr(web_ws.WebSocketResponse, "get_extra_info"):
        def get_extra_info(self, name, default=None):
            req = getattr(self, "_req", None)
            transport = req.transport if req is not None else None
            return default if transport is None else transport.get_extra_info(name, default)

        web_ws.WebSocketResponse.get_extra_info = get_extra_info


sys.dont_write_bytecode = True
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fallback"))
_patch_cryptography()
_patch_aiohttp()
