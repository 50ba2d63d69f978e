package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// catalogueImage is one image a registry serves: its name with tag, digest (the image ID),
// size, how long a pull takes, and whether the node's AMI already has it.
type catalogueImage struct {
	Ref         string  `json:"ref"`
	ID          string  `json:"id"`
	Size        uint64  `json:"size"`
	PullSeconds float64 `json:"pull_seconds"`
	Present     bool    `json:"present"`
	// the image's USER as a numeric uid (the kubelet checks runAsNonRoot against it); nil: root
	UID *int64 `json:"uid"`
}

func loadCatalogue(path string) ([]catalogueImage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--images: %w", err)
	}
	var images []catalogueImage
	if err := json.Unmarshal(data, &images); err != nil {
		return nil, fmt.Errorf("--images %s: %w", path, err)
	}
	for i := range images {
		images[i].Ref = normalized(images[i].Ref)
	}
	return images, nil
}

// normalized is the full reference containerd reports: docker.io/library/ for a bare name,
// :latest for a name without tag or digest.
func normalized(ref string) string {
	name, digest, hasDigest := strings.Cut(ref, "@")
	first, _, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + name
	}
	if !hasDigest && !strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		name += ":latest"
	}
	if hasDigest {
		return name + "@" + digest
	}
	return name
}

// repository is a reference without its tag or digest.
func repository(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	if slash := strings.LastIndex(name, "/"); strings.Contains(name[slash+1:], ":") {
		name = name[:slash+1+strings.Index(name[slash+1:], ":")]
	}
	return name
}

type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	served []catalogueImage
	// the directory whose filesystem holds the images (the kubelet's image GC reads its usage)
	fsDir string
	mu    sync.Mutex
	// image ID -> the image, for those on the node
	present map[string]catalogueImage
}

func newImages(catalogue []catalogueImage, fsDir string) *imageService {
	s := &imageService{served: catalogue, fsDir: fsDir, present: map[string]catalogueImage{}}
	for _, image := range catalogue {
		if image.Present {
			s.present[image.ID] = image
		}
	}
	return s
}

// find is the served image a reference names (by name and tag, by digest, or by ID).
func (s *imageService) find(ref string) (catalogueImage, bool) {
	full := normalized(ref)
	for _, image := range s.served {
		if image.Ref == full || image.ID == ref || (strings.Contains(full, "@") && repository(full) == repository(image.Ref) && strings.HasSuffix(full, "@"+image.ID)) {
			return image, true
		}
	}
	return catalogueImage{}, false
}

func (s *imageService) onNode(ref string) (catalogueImage, bool) {
	image, known := s.find(ref)
	if !known {
		return image, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, here := s.present[image.ID]
	return image, here
}

func toCRI(image catalogueImage) *runtimeapi.Image {
	described := &runtimeapi.Image{
		Id:          image.ID,
		RepoTags:    []string{image.Ref},
		RepoDigests: []string{repository(image.Ref) + "@" + image.ID},
		Size:        image.Size,
		Spec:        &runtimeapi.ImageSpec{Image: image.ID},
	}
	if image.UID != nil {
		described.Uid = &runtimeapi.Int64Value{Value: *image.UID}
	}
	return described
}

func (s *imageService) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	s.mu.Lock()
	images := make([]catalogueImage, 0, len(s.present))
	for _, image := range s.present {
		images = append(images, image)
	}
	s.mu.Unlock()
	sort.Slice(images, func(i, j int) bool { return images[i].Ref < images[j].Ref })
	var listed []*runtimeapi.Image
	for _, image := range images {
		if want := req.GetFilter().GetImage().GetImage(); want != "" {
			if found, _ := s.find(want); found.ID != image.ID {
				continue
			}
		}
		listed = append(listed, toCRI(image))
	}
	return &runtimeapi.ListImagesResponse{Images: listed}, nil
}

func (s *imageService) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	image, here := s.onNode(req.GetImage().GetImage())
	if !here {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: toCRI(image)}, nil
}

// PullImage fails as containerd does for what no registry serves: a repository nobody has is
// "pull access denied", a tag its repository lacks is "not found".
func (s *imageService) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := normalized(req.GetImage().GetImage())
	image, known := s.find(ref)
	if !known {
		for _, served := range s.served {
			if repository(served.Ref) == repository(ref) {
				return nil, status.Errorf(codes.NotFound, "failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", ref, ref, ref)
			}
		}
		return nil, status.Errorf(codes.Unknown, "failed to pull and unpack image %q: failed to resolve reference %q: pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed", ref, ref)
	}
	if _, here := s.onNode(ref); !here {
		select {
		case <-time.After(time.Duration(image.PullSeconds * float64(time.Second))):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.mu.Lock()
		s.present[image.ID] = image
		s.mu.Unlock()
	}
	return &runtimeapi.PullImageResponse{ImageRef: image.ID}, nil
}

func (s *imageService) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	if image, known := s.find(req.GetImage().GetImage()); known {
		s.mu.Lock()
		delete(s.present, image.ID)
		s.mu.Unlock()
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (s *imageService) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	s.mu.Lock()
	var used, count uint64
	for _, image := range s.present {
		used += image.Size
		count++
	}
	s.mu.Unlock()
	usage := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.fsDir},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: count * 1000},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{usage}}, nil
}

// addresses hands out the pod CIDR's addresses, never two alike at once.
type addresses struct {
	mu    sync.Mutex
	first netip.Addr
	last  netip.Addr
	next  netip.Addr
	used  map[netip.Addr]bool
}

func newAddresses(cidr, nodeIP string) (*addresses, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("--pod-cidr: %w", err)
	}
	prefix = prefix.Masked()
	first := prefix.Addr().Next() // not the network's own address
	last := first
	for next := last.Next(); prefix.Contains(next) && prefix.Contains(next.Next()); next = next.Next() {
		last = next // the broadcast address stays out
	}
	a := &addresses{first: first, last: last, next: first, used: map[netip.Addr]bool{}}
	if node, err := netip.ParseAddr(nodeIP); err == nil {
		a.used[node] = true
	}
	return a, nil
}

func (a *addresses) take() (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for tried := a.next; ; {
		candidate := a.next
		a.next = a.next.Next()
		if a.next.Compare(a.last) > 0 {
			a.next = a.first
		}
		if !a.used[candidate] {
			a.used[candidate] = true
			return candidate.String(), nil
		}
		if a.next == tried {
			return "", fmt.Errorf("no address left in the pod CIDR")
		}
	}
}

func (a *addresses) give(address string) {
	if ip, err := netip.ParseAddr(address); err == nil {
		a.mu.Lock()
		delete(a.used, ip)
		a.mu.Unlock()
	}
}
