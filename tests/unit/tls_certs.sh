#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tls_certs.sh DIR — makes the certificates the TLS link tests use, with openssl:
#   rootCA.pem rootCA.key          the provisioning CA
#   server.crt server.key          CN=server, SAN server/localhost/127.0.0.1/::1, signed by rootCA (key in
#                                  PKCS#8 "BEGIN PRIVATE KEY" form)
#   client.crt client.key          CN=site-1, signed by rootCA (key in PKCS#1 "BEGIN RSA PRIVATE KEY" form,
#                                  as NVFlare provisions it)
#   expired.crt                    CN=site-1, signed by rootCA, valid 2020-01-01..2020-01-02 (key: client.key)
#   wrongCA.pem wrongCA.key        another CA
#   wrong.crt                      CN=site-1 signed by wrongCA (key: client.key)
# Exit status 0 when every file was made.
set -eu
d=${1:?usage: tls_certs.sh DIR}
mkdir -p "$d"
cd "$d"
exec 2>openssl.log   # openssl is chatty; keep its output for debugging only

key_rsa() { openssl genrsa -traditional -out "$1" 2048; }
key_p8()  { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1"; }

ca() {   # ca NAME CN
    key_rsa "$1.key"
    openssl req -x509 -new -key "$1.key" -sha256 -days 30 -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$1.pem"
}

printf 'basicConstraints=CA:FALSE\n' > leaf.ext
# A provisioned FLARE server's certificate names its host (grpcs clients check it).
printf 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:server,DNS:localhost,IP:127.0.0.1,IP:::1\n' > server.ext
leaf() { # leaf OUT KEY CN CA [EXTFILE]
    openssl req -new -key "$2" -subj "/CN=$3" -out "$1.csr"
    openssl x509 -req -in "$1.csr" -CA "$4.pem" -CAkey "$4.key" -CAcreateserial -sha256 -days 30 \
        -extfile "${5:-leaf.ext}" -out "$1.crt"
}

ca rootCA cjrelay-test-root
ca wrongCA cjrelay-test-other-root
key_p8 server.key
key_rsa client.key
leaf server server.key server rootCA server.ext
leaf client client.key site-1 rootCA
leaf wrong client.key site-1 wrongCA

# An expired certificate: `openssl ca` takes explicit dates.
mkdir -p newcerts
: > index.txt
printf '1000\n' > serial
cat > ca.cnf <<'EOF'
[ ca ]
default_ca = CA_default
[ CA_default ]
dir = .
database = ./index.txt
new_certs_dir = ./newcerts
serial = ./serial
default_md = sha256
policy = policy_any
unique_subject = no
x509_extensions = leaf_ext
[ policy_any ]
commonName = supplied
[ leaf_ext ]
basicConstraints = CA:FALSE
EOF
openssl req -new -key client.key -subj "/CN=site-1" -out expired.csr
openssl ca -batch -config ca.cnf -cert rootCA.pem -keyfile rootCA.key -in expired.csr -out expired.crt \
    -startdate 20200101000000Z -enddate 20200102000000Z -notext
chmod 600 ./*.key
for f in rootCA.pem server.crt server.key client.crt client.key expired.crt wrongCA.pem wrong.crt; do
    [ -s "$f" ]
done
