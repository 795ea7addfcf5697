"""Static files as production serves them: hashed and compressed."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticFilesStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's compressed manifest storage: collectstatic writes each
    file under a name holding a hash of its content, with a gzip copy, and
    pages link those names, which WhiteNoise serves with far-future cache
    headers.

    A name the manifest does not hold — before any collectstatic (the tests,
    a fresh checkout), or a file added since the last one — is linked by its
    plain name instead of failing the page: WhiteNoise serves it from the
    apps' folders (WHITENOISE_USE_FINDERS), with a short cache time.
    """

    def stored_name(self, name):
        try:
            return super().stored_name(name)
        except ValueError:
            return name
