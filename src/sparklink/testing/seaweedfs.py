"""The private S3 server of the test harness: SeaweedFS ``weed mini`` on 127.0.0.1.

The launcher lives in :mod:`sparklink.cli.seaweedfs`, because `sparklink demo --s3` starts the
same server and the runtime never imports the harness; tests import it from here.
"""

from sparklink.cli.seaweedfs import (  # noqa: F401 - re-exported for the tests
                                     ACCESS_KEY_ID,
                                     REGION,
                                     SECRET_ACCESS_KEY,
                                     SeaweedServer,
                                     start_seaweedfs,
                                     weed_binary,
)
