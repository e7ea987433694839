#include "core/tls.h"

#include <pthread.h>

#include <cstdlib>
#include <new>

namespace infer::detail {

namespace {

struct Node {
  void (*fn)(void*);
  void* obj;
  Node* next;
};

void run_all(void* head) {
  for (Node* n = static_cast<Node*>(head); n;) {
    Node* next = n->next;
    n->fn(n->obj);
    std::free(n);
    n = next;
  }
}

// Created once; 0 or the pthread_key_create error.
int key_status(pthread_key_t* key) {
  static pthread_key_t k;
  static const int err = pthread_key_create(&k, run_all);
  *key = k;
  return err;
}

}  // namespace

void tls_at_exit(void (*fn)(void*), void* obj) {
  pthread_key_t key;
  if (key_status(&key) != 0) throw std::bad_alloc();
  Node* n = static_cast<Node*>(std::malloc(sizeof(Node)));
  if (!n) throw std::bad_alloc();
  n->fn = fn;
  n->obj = obj;
  n->next = static_cast<Node*>(pthread_getspecific(key));
  if (pthread_setspecific(key, n) != 0) {
    std::free(n);
    throw std::bad_alloc();
  }
}

}  // namespace infer::detail
