# kubectl-qgpu is a kubectl plugin; the image is for running it in a cluster job.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/kubectl-qgpu ./cmd/kubectl-qgpu

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kubectl-qgpu /usr/local/bin/kubectl-qgpu
ENTRYPOINT ["/usr/local/bin/kubectl-qgpu"]
