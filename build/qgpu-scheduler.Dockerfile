# Build from the repository root:
#   docker build -f build/qgpu-scheduler.Dockerfile -t qgpu-scheduler .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/qgpu-scheduler ./cmd/qgpu-scheduler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/qgpu-scheduler /usr/local/bin/qgpu-scheduler
ENTRYPOINT ["/usr/local/bin/qgpu-scheduler"]
