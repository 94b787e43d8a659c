# The sidecar image, for users with Docker:
#
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
#
# `make image` builds the same image without a Docker engine (deploy/image); the test
# TestDockerfileAgrees there checks that both give the same files, owners and modes,
# user, entrypoint, working directory, environment and labels. Argo CD's
# argocd-cmp-server comes from the shared var-files volume at run time (repo-server's
# init container copies it), so the image holds only our binaries, CA certificates and
# the user Argo CD's sidecars run as (999); no shell.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# passwd and group with user 999, CA certificates, /home/argocd (owned by 999), /tmp
# and /usr/local/bin, written by deploy/image as make image writes them.
RUN go run ./cmd/build-image -rootfs /rootfs
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /rootfs/usr/local/bin/ ./cmd/argocd-image-resolver ./cmd/argocd-image-resolver-generate

FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
# COPY --from keeps the owners and modes the build stage wrote.
COPY --from=build /rootfs/ /
USER 999:999
WORKDIR /home/argocd
ENV PATH=/usr/local/bin:/usr/bin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    HOME=/home/argocd
LABEL org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${COMMIT} \
      org.opencontainers.image.source=https://github.com/argocd-image-resolver/argocd-image-resolver \
      org.opencontainers.image.title=argocd-image-resolver \
      org.opencontainers.image.licenses=Apache-2.0
ENTRYPOINT ["argocd-image-resolver", "sidecar", "--", "/var/run/argocd/argocd-cmp-server"]
