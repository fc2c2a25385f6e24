# Build from the repository root:
#   docker build -f build/qgpu-agent.Dockerfile -t qgpu-agent .
# go-nvml needs cgo; NVML itself (libnvidia-ml.so.1) comes from the host
# driver, mounted by the NVIDIA container runtime at run time.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/qgpu-agent ./cmd/qgpu-agent

FROM gcr.io/distroless/base-debian12
COPY --from=build /out/qgpu-agent /usr/local/bin/qgpu-agent
ENTRYPOINT ["/usr/local/bin/qgpu-agent"]
