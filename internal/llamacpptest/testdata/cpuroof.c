// cpuroof: one thread's roofline figures, with the ISA llama.cpp's build.sh
// uses (GGML_NATIVE=OFF: AVX2, FMA, F16C). Prints the best of many runs, so a
// busy machine's interruptions fall out.
//   gcc -O2 -mavx2 -mfma -mf16c -o cpuroof cpuroof.c && ./cpuroof
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// fma_peak: 12 independent chains of 256-bit FMAs, registers only.
static double fma_peak(long iters) {
  __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3),
         a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7),
         a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  double t0 = now();
  for (long k = 0; k < iters; k++) {
#define F(x) x = _mm256_fmadd_ps(x, m, c)
    F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
  }
  double dt = now() - t0;
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  if (out[0] == 12345.f) printf("!");
  return iters * 12.0 * 8 * 2 / dt;
}

// read_bw: bytes/s reading n bytes with 256-bit loads, 4 accumulators.
static double read_bw(const float *p, size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  size_t m = n / sizeof(float);
  double t0 = now();
  for (size_t i = 0; i + 32 <= m; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
  }
  double dt = now() - t0;
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  if (out[0] == 12345.f) printf("!");
  return n / dt;
}

// f16_dot: ggml's vec_dot_f16 on AVX2 (both operands f16, converted with
// F16C, 4 accumulators of 8), over 4 KiB rows that stay in L1.
static double f16_dot(long reps) {
  static unsigned short x[2048] __attribute__((aligned(64))), y[2048] __attribute__((aligned(64)));
  for (int i = 0; i < 2048; i++) { x[i] = 0x3c00; y[i] = 0x3800; }
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  double t0 = now();
  for (long r = 0; r < reps; r++) {
    for (int i = 0; i < 2048; i += 32) {
#define L(p) _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p)))
      s0 = _mm256_fmadd_ps(L(x + i), L(y + i), s0);
      s1 = _mm256_fmadd_ps(L(x + i + 8), L(y + i + 8), s1);
      s2 = _mm256_fmadd_ps(L(x + i + 16), L(y + i + 16), s2);
      s3 = _mm256_fmadd_ps(L(x + i + 24), L(y + i + 24), s3);
    }
    __asm__ volatile("" : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3));
  }
  double dt = now() - t0;
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  if (out[0] == 12345.f) printf("!");
  return reps * 2048.0 * 2 / dt;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 30;
  double best = 0;
  for (int r = 0; r < runs; r++) {
    double f = fma_peak(1000000);
    if (f > best) best = f;
  }
  printf("fma_f32_gflops %.1f\n", best / 1e9);
  best = 0;
  for (int r = 0; r < runs; r++) {
    double f = f16_dot(2000);
    if (f > best) best = f;
  }
  printf("f16_dot_gflops %.1f\n", best / 1e9);
  size_t sizes[] = {19u << 20, 512u << 20};
  for (int k = 0; k < 2; k++) {
    size_t n = sizes[k];
    float *p = aligned_alloc(64, n);
    memset(p, 0, n);
    double b = 0;
    for (int r = 0; r < runs; r++) {
      double x = read_bw(p, n);
      if (x > b) b = x;
    }
    printf("read_gb_s %zu_MiB %.1f\n", n >> 20, b / 1e9);
    free(p);
  }
  return 0;
}
