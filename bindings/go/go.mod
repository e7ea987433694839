module libinfer/infer

go 1.19
