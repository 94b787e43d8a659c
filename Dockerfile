# The sidecar image: our binary on a minimal base. Argo CD's argocd-cmp-server comes
# from the shared var-files volume at run time (repo-server's init container copies it).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/ ./cmd/argocd-image-resolver ./cmd/argocd-image-resolver-generate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/argocd-image-resolver /out/argocd-image-resolver-generate /usr/local/bin/
USER 999:999
ENTRYPOINT ["argocd-image-resolver", "sidecar", "--", "/var/run/argocd/argocd-cmp-server"]
