"""An FTP server that refuses SIZE and MDTM (pyftpdlib, anonymous, read-only), for
scripts/e2e-ftp: a download from it must fall back to one stream with no size and no validator.
Usage: ftp_refusing.py ROOT PORT-FILE
"""
import sys

from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer


class RefusingHandler(FTPHandler):
    def ftp_SIZE(self, path):
        self.respond("502 SIZE not implemented.")

    def ftp_MDTM(self, path):
        self.respond("502 MDTM not implemented.")


def main():
    root, port_file = sys.argv[1:3]
    authorizer = DummyAuthorizer()
    authorizer.add_anonymous(root, perm="elr")
    RefusingHandler.authorizer = authorizer
    server = FTPServer(("127.0.0.1", 0), RefusingHandler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.socket.getsockname()[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever(handle_exit=True)


if __name__ == "__main__":
    main()
